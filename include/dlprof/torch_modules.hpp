// dlprof/torch_modules.hpp: a range per LibTorch module call, named as torch.profiler names
// module ranges ("nn.Module: <Type>_<path>"), for a whole model with one call:
//
//   auto model = MnistCnn();
//   dlprof::annotate_modules(model);   // once, before training, from the thread that trains
//   ...
//   torch::Tensor forward(torch::Tensor x) {   // a custom module of your own
//     DLPROF_MODULE(this);                     // "nn.Module: MnistCnn", the root
//     return classifier->forward(features->forward(x));   // "nn.Module: Conv2d_features.0", ...
//   }
//
// annotate_modules(model) walks model->named_modules() once and gives every module a range name:
// "nn.Module: <Type>_<dotted path>" ("nn.Module: Conv2d_features.0"), the root "nn.Module: <Type>"
// ("nn.Module: MnistCnn"). <Type> is Module::name() without namespaces and without the "Impl"
// suffix. Ranges are Forward-category ranges: `user_annotation` slices in the trace, NVTX ranges
// in Nsight Systems.
//
// Which calls become ranges (LibTorch 1.13 and 2.x alike):
//  * Elements of a torch::nn::Sequential, anywhere in the tree. Sequential calls each element
//    through a type-erased AnyModule, which annotate_modules replaces by one that opens the range
//    and runs the element's forward (any signature, FORWARD_HAS_DEFAULT_ARGS defaults, no
//    allocation of its own). The element stays the same module under the same name, so its
//    parameters, state_dict paths, seq[i], seq->at<T>(i) and clone() are unchanged. Its type must
//    be known at compile time: LibTorch's layers are (LibTorchLayers below); name your own as
//    template arguments, annotate_modules<ResidualBlockImpl>(model), or put DLPROF_MODULE(this)
//    in their forward. Elements of other types are left as they are and listed in the result's
//    `unwrapped`.
//  * Your own modules' forward, with DLPROF_MODULE(this) ("nn.Module: <Type>" for a module
//    annotate_modules never saw). Inside an annotated Sequential element only one range opens.
// Calls that LibTorch makes directly (templates, not virtual calls) get a range only from a
// DLPROF_MODULE around them, or by moving the layer into a Sequential: members of custom modules
// (DLPROF_MODULE(fc1) around fc1(x)), ModuleList and ModuleDict elements, a Sequential's own
// forward (DLPROF_MODULE(features) around it) and the root, from the training loop:
// { DLPROF_MODULE(model); loss = model->forward(x); }. A clone() of an annotated model is not
// annotated: call annotate_modules on the clone.
//
// Cost: annotate_modules runs once (a registry entry and an interned name per module). A call of
// an annotated element or a DLPROF_MODULE while no Profiler window is open and no NVTX tool is
// attached is one relaxed load and a branch, and allocates nothing. While recording, an element's
// range is what a DLPROF_RANGE costs (its name is interned in advance); DLPROF_MODULE adds one
// lookup in the registry under a mutex.
//
// Thread-safety: call annotate_modules while no other thread runs or changes the model (it
// replaces Sequential elements in place). Annotated models and DLPROF_MODULE run on any thread.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/any_module_holder.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/active.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/correlation.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/nvtx.hpp"
#include "dlprof/detail/recording/ring_registry.hpp"
#include "dlprof/detail/recording/name_table.hpp"
#include "dlprof/category.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/range.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// A module's range name, interned once: the id events carry and the text NVTX shows (interned
/// strings never move or die).
struct ModuleName {
  NameId id = 0;
  const std::string* text = nullptr;
};

inline ModuleName intern_module_name(std::string_view name) {
  const std::string* text = nullptr;
  const NameId id = InternTable::instance().intern_locked(name, &text);
  return ModuleName{id, text};
}

/// The type as torch.profiler shows a module's class: "torch::nn::Conv2dImpl" -> "Conv2d",
/// "(anonymous namespace)::BlockImpl<3>" -> "Block<3>". A name given to Module's constructor
/// stays as it is.
inline std::string module_type_name(std::string_view qualified) {
  std::size_t start = 0;
  int depth = 0;
  for (std::size_t i = 0; i < qualified.size(); ++i) {
    const char c = qualified[i];
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') --depth;
    if (depth == 0 && c == ':' && i + 1 < qualified.size() && qualified[i + 1] == ':') start = i + 2;
  }
  const std::string_view name = qualified.substr(start);
  std::string_view type = name.substr(0, name.find('<'));
  const std::string_view arguments = name.substr(type.size());
  constexpr std::string_view kImpl = "Impl";
  if (type.size() > kImpl.size() && type.substr(type.size() - kImpl.size()) == kImpl) type.remove_suffix(kImpl.size());
  return std::string(type).append(arguments);
}

inline std::string module_type_name(const torch::nn::Module& module) { return module_type_name(module.name()); }

/// Module -> range name, for DLPROF_MODULE. Entries hold a weak_ptr to their module so that a new
/// module allocated where a destroyed one lived is not given its name.
class ModuleRegistry {
 public:
  static ModuleRegistry& instance() {
    static ModuleRegistry* registry = new ModuleRegistry();  // forward may run during exit
    return *registry;
  }

  void set(const torch::nn::Module& module, ModuleName name) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_[&module] = make_entry(module, name);
  }

  /// The name annotate_modules gave `module`, or "nn.Module: <Type>" for a module it never saw.
  ModuleName name_of(const torch::nn::Module& module) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = entries_.find(&module);
    if (found != entries_.end() && !stale(found->second)) return found->second.name;
    const ModuleName name = intern_module_name(std::string(kineto::name::kModulePrefix) + module_type_name(module));
    if (entries_.size() >= prune_at_) prune_locked();
    entries_[&module] = make_entry(module, name);
    return name;
  }

  /// Forgets destroyed modules.
  void prune() {
    std::lock_guard<std::mutex> lock(mutex_);
    prune_locked();
  }

 private:
  struct Entry {
    ModuleName name;
    std::weak_ptr<const torch::nn::Module> owner;
    bool owned;  // false: not held by a shared_ptr (a root on the stack), cannot be checked
  };

  static Entry make_entry(const torch::nn::Module& module, ModuleName name) {
    std::weak_ptr<const torch::nn::Module> owner = module.weak_from_this();
    const bool owned = !owner.expired();
    return Entry{name, std::move(owner), owned};
  }
  static bool stale(const Entry& entry) noexcept { return entry.owned && entry.owner.expired(); }

  void prune_locked() {
    for (auto it = entries_.begin(); it != entries_.end();) it = stale(it->second) ? entries_.erase(it) : std::next(it);
    prune_at_ = 2 * entries_.size() + 1024;
  }

  ModuleRegistry() = default;
  std::mutex mutex_;  // guards entries_ and prune_at_; taken before InternTable's lock, never after
  std::unordered_map<const torch::nn::Module*, Entry> entries_;
  std::size_t prune_at_ = 1024;
};

/// The module whose range is the innermost open module range on this thread: a module called as
/// a wrapped Sequential element with DLPROF_MODULE(this) in its forward opens one range, not two.
/// Constant-initialised: no TLS guard on access.
inline thread_local const torch::nn::Module* t_open_module = nullptr;

}  // namespace detail

/// The range of one module call (what DLPROF_MODULE expands to): a Forward-category range named
/// after the module by annotate_modules, on the calling thread, to the end of the scope.
/// Cost while no Profiler window is open and no NVTX tool is attached: one relaxed load and a
/// branch at each end.
class ModuleRange {
 public:
  /// The range of `module` (nullptr: none).
  DLPROF_ALWAYS_INLINE explicit ModuleRange(const torch::nn::Module* module) noexcept
      : flags_(detail::active_flags()) {
    if (DLPROF_UNLIKELY(flags_ != 0)) begin_registered(module);
  }

  /// The range of the module a holder holds (an empty holder: none): DLPROF_MODULE(features).
  template <class Contained>
  DLPROF_ALWAYS_INLINE explicit ModuleRange(const torch::nn::ModuleHolder<Contained>& holder) noexcept
      : flags_(detail::active_flags()) {
    if (DLPROF_UNLIKELY(flags_ != 0)) begin_registered(holder.is_empty() ? nullptr : holder.get());
  }

  /// A range whose name is known already (annotated Sequential elements).
  DLPROF_ALWAYS_INLINE ModuleRange(const detail::ModuleName& name, const torch::nn::Module* module) noexcept
      : flags_(detail::active_flags()) {
    if (DLPROF_UNLIKELY(flags_ != 0)) begin(name, module);
  }

  DLPROF_ALWAYS_INLINE ~ModuleRange() {
    if (DLPROF_UNLIKELY(flags_ != 0)) end();
  }

  ModuleRange(const ModuleRange&) = delete;
  ModuleRange& operator=(const ModuleRange&) = delete;
  ModuleRange(ModuleRange&&) = delete;
  ModuleRange& operator=(ModuleRange&&) = delete;
  static void* operator new(std::size_t) = delete;
  static void* operator new[](std::size_t) = delete;

 private:
  DLPROF_NOINLINE void begin_registered(const torch::nn::Module* module) noexcept {
    if (module == nullptr || module == detail::t_open_module) {
      flags_ = 0;
      return;
    }
    detail::ModuleName name;
    try {
      name = detail::ModuleRegistry::instance().name_of(*module);
    } catch (...) {  // no memory to name it: no range
      flags_ = 0;
      return;
    }
    begin(name, module);
  }

  DLPROF_NOINLINE void begin(const detail::ModuleName& name, const torch::nn::Module* module) noexcept {
    if (module == detail::t_open_module) {  // its range is open already (a wrapped element's forward)
      flags_ = 0;
      return;
    }
    previous_ = detail::t_open_module;
    detail::t_open_module = module;
    if (flags_ & detail::kNvtxAttached) detail::nvtx_push(*name.text, Category::Forward);
    if (flags_ & detail::kRecording) {
      name_ = name.id;
      if (flags_ & detail::kCorrelating)
        correlation_sequence_ = detail::push_external_correlation(name_, 0, detail::RecordKind::Range);
      begin_ = detail::now_ticks();
    }
  }

  DLPROF_NOINLINE void end() noexcept {
    if (flags_ & detail::kRecording) {
      detail::push_event(detail::Event{name_, begin_, {detail::now_ticks()}, detail::RecordKind::Range, Category::Forward,
                                       correlation_sequence_});
      if (correlation_sequence_ != 0) detail::pop_external_correlation();
    }
    if (flags_ & detail::kNvtxAttached) detail::nvtx_pop();
    detail::t_open_module = previous_;
  }

  std::uint32_t flags_;
  std::uint32_t correlation_sequence_ = 0;  // non-zero: an external correlation id was pushed
  detail::NameId name_ = 0;
  std::int64_t begin_ = 0;
  const torch::nn::Module* previous_ = nullptr;
};

namespace detail {

template <class... Types>
struct TypeList {};

/// LibTorch's layers (present in 1.13 and 2.x), the element types annotate_modules wraps
/// without being told.
using LibTorchLayers = TypeList<
    // convolution, linear, embedding
    torch::nn::Conv1dImpl, torch::nn::Conv2dImpl, torch::nn::Conv3dImpl, torch::nn::ConvTranspose1dImpl,
    torch::nn::ConvTranspose2dImpl, torch::nn::ConvTranspose3dImpl, torch::nn::LinearImpl, torch::nn::BilinearImpl,
    torch::nn::IdentityImpl, torch::nn::FlattenImpl, torch::nn::UnflattenImpl, torch::nn::EmbeddingImpl,
    torch::nn::EmbeddingBagImpl, torch::nn::FoldImpl, torch::nn::UnfoldImpl,
    // normalisation, dropout
    torch::nn::BatchNorm1dImpl, torch::nn::BatchNorm2dImpl, torch::nn::BatchNorm3dImpl,
    torch::nn::InstanceNorm1dImpl, torch::nn::InstanceNorm2dImpl, torch::nn::InstanceNorm3dImpl,
    torch::nn::LayerNormImpl, torch::nn::GroupNormImpl, torch::nn::LocalResponseNormImpl, torch::nn::CrossMapLRN2dImpl,
    torch::nn::DropoutImpl, torch::nn::Dropout2dImpl, torch::nn::Dropout3dImpl, torch::nn::AlphaDropoutImpl,
    torch::nn::FeatureAlphaDropoutImpl,
    // activations
    torch::nn::ReLUImpl, torch::nn::ReLU6Impl, torch::nn::LeakyReLUImpl, torch::nn::PReLUImpl, torch::nn::RReLUImpl,
    torch::nn::ELUImpl, torch::nn::SELUImpl, torch::nn::CELUImpl, torch::nn::GELUImpl, torch::nn::SiLUImpl,
    torch::nn::MishImpl, torch::nn::SigmoidImpl, torch::nn::LogSigmoidImpl, torch::nn::TanhImpl, torch::nn::GLUImpl,
    torch::nn::HardtanhImpl, torch::nn::HardshrinkImpl, torch::nn::SoftshrinkImpl, torch::nn::TanhshrinkImpl,
    torch::nn::ThresholdImpl, torch::nn::SoftplusImpl, torch::nn::SoftsignImpl, torch::nn::SoftmaxImpl,
    torch::nn::SoftminImpl, torch::nn::LogSoftmaxImpl, torch::nn::Softmax2dImpl,
    // pooling, padding, resampling
    torch::nn::MaxPool1dImpl, torch::nn::MaxPool2dImpl, torch::nn::MaxPool3dImpl, torch::nn::AvgPool1dImpl,
    torch::nn::AvgPool2dImpl, torch::nn::AvgPool3dImpl, torch::nn::AdaptiveMaxPool1dImpl,
    torch::nn::AdaptiveMaxPool2dImpl, torch::nn::AdaptiveMaxPool3dImpl, torch::nn::AdaptiveAvgPool1dImpl,
    torch::nn::AdaptiveAvgPool2dImpl, torch::nn::AdaptiveAvgPool3dImpl, torch::nn::LPPool1dImpl,
    torch::nn::LPPool2dImpl, torch::nn::FractionalMaxPool2dImpl, torch::nn::FractionalMaxPool3dImpl,
    torch::nn::MaxUnpool1dImpl, torch::nn::MaxUnpool2dImpl, torch::nn::MaxUnpool3dImpl,
    torch::nn::ReflectionPad1dImpl, torch::nn::ReflectionPad2dImpl, torch::nn::ReflectionPad3dImpl,
    torch::nn::ReplicationPad1dImpl, torch::nn::ReplicationPad2dImpl, torch::nn::ReplicationPad3dImpl,
    torch::nn::ConstantPad1dImpl, torch::nn::ConstantPad2dImpl, torch::nn::ConstantPad3dImpl,
    torch::nn::ZeroPad2dImpl, torch::nn::UpsampleImpl, torch::nn::PixelShuffleImpl, torch::nn::PixelUnshuffleImpl,
    // distances, recurrent layers, functions
    torch::nn::CosineSimilarityImpl, torch::nn::PairwiseDistanceImpl, torch::nn::RNNImpl, torch::nn::LSTMImpl,
    torch::nn::GRUImpl, torch::nn::RNNCellImpl, torch::nn::LSTMCellImpl, torch::nn::GRUCellImpl,
    torch::nn::FunctionalImpl>;

/// The object an annotated element's AnyModule is built from. AnyModule reads the element's
/// forward signature from ModuleSlot::forward (the same as M::forward), and builds its holder,
/// the specialisation of torch::nn::AnyModuleHolder below; ModuleSlot itself is dropped then.
template <class M, class Forward = decltype(&M::forward)>
class ModuleSlot {
  static_assert(always_false<M>::value,
                "dlprof::annotate_modules<T>: T needs one non-template, non-const forward() (what Sequential and "
                "AnyModule accept)");
};

template <class M, class Result, class Class, class... Arguments>
class ModuleSlot<M, Result (Class::*)(Arguments...)> : public torch::nn::Module {
 public:
  ModuleSlot(std::shared_ptr<M> module, ModuleName name) : module_(std::move(module)), name_(name) {}

  /// Gives AnyModule the argument types; calls go through the holder, which calls M::forward.
  Result forward(Arguments... arguments) { return module_->forward(std::forward<Arguments>(arguments)...); }

  const std::shared_ptr<M>& module() const noexcept { return module_; }
  const ModuleName& name() const noexcept { return name_; }

 private:
  std::shared_ptr<M> module_;
  ModuleName name_;
};

}  // namespace detail
DLPROF_END_NAMESPACE

namespace torch {
namespace nn {

/// The holder of an annotated Sequential element: LibTorch's own holder of the element's module
/// (AnyModuleHolder<M, Arguments...>, exactly what AnyModule(shared_ptr<M>) makes, so
/// AnyModule::get<M>() and Sequential::at<M>() still find it and type_info() is still M's) whose
/// forward opens the element's range around LibTorch's unboxing and the call. Copies keep the
/// range; clone_module() (Sequential::clone) is LibTorch's, and gives plain elements.
template <class M, class Forward, class... Arguments>
struct AnyModuleHolder<::dlprof::detail::ModuleSlot<M, Forward>, Arguments...> : AnyModuleHolder<M, Arguments...> {
  using Base = AnyModuleHolder<M, Arguments...>;

  explicit AnyModuleHolder(std::shared_ptr<::dlprof::detail::ModuleSlot<M, Forward>>&& slot)
      : Base(std::shared_ptr<M>(slot->module())), range_name(slot->name()) {}

  AnyValue forward(std::vector<AnyValue>&& arguments) override {
    const ::dlprof::ModuleRange range(range_name, this->module.get());
    return Base::forward(std::move(arguments));
  }

  std::unique_ptr<AnyModulePlaceholder> copy() const override { return std::make_unique<AnyModuleHolder>(*this); }

  ::dlprof::detail::ModuleName range_name;
};

}  // namespace nn
}  // namespace torch

DLPROF_BEGIN_NAMESPACE

/// What annotate_modules did.
struct ModuleAnnotation {
  std::size_t named = 0;    ///< modules given a range name, the root included
  std::size_t wrapped = 0;  ///< Sequential elements whose every call is now a range
  /// Sequential elements of types dlprof does not know, left as they were, as "<path> (<Type>)":
  /// name the types as annotate_modules' template arguments or give them DLPROF_MODULE(this).
  std::vector<std::string> unwrapped;
};

namespace detail {

template <class M>
bool wrap_element_as(torch::nn::AnyModule& element, const ModuleName& name) {
  if (element.type_info() != typeid(M)) return false;
  // Not element.ptr<M>(): AnyModule::get<M> does not compile for layers whose forward is
  // inherited (ReplicationPad2dImpl's is ReplicationPadImpl<2, ...>'s).
  element = torch::nn::AnyModule(std::make_shared<ModuleSlot<M>>(std::dynamic_pointer_cast<M>(element.ptr()), name));
  return true;
}

template <class Layers, class... Extra>
struct ElementWrapper;

template <class... Layers, class... Extra>
struct ElementWrapper<TypeList<Layers...>, Extra...> {
  /// Replaces `element` by an annotated one if its type is known; false otherwise.
  static bool wrap(torch::nn::AnyModule& element, const ModuleName& name) {
    return (wrap_element_as<Extra>(element, name) || ...) || (wrap_element_as<Layers>(element, name) || ...);
  }
};

using WrapElement = bool (*)(torch::nn::AnyModule& element, const ModuleName& name);

/// The walk behind annotate_modules: names every module, then replaces Sequential elements.
inline ModuleAnnotation annotate_module_tree(torch::nn::Module& root, WrapElement wrap) {
  ModuleRegistry& registry = ModuleRegistry::instance();
  registry.prune();
  struct Named {
    ModuleName name;
    std::string path;
  };
  std::unordered_map<const torch::nn::Module*, Named> named;
  std::vector<std::pair<torch::nn::SequentialImpl*, std::string>> sequentials;
  ModuleAnnotation result;

  const auto add = [&](torch::nn::Module& module, const std::string& path) {
    if (named.count(&module) != 0) return;  // reachable twice: the first path names it, as in torch
    std::string range_name = std::string(kineto::name::kModulePrefix) + module_type_name(module);
    if (!path.empty()) range_name.append("_").append(path);
    const ModuleName name = intern_module_name(range_name);
    named.emplace(&module, Named{name, path});
    registry.set(module, name);
    ++result.named;
    if (auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(&module))
      sequentials.emplace_back(sequential, path);
  };
  add(root, "");
  // Without the root: named_modules() with it needs a root held by a shared_ptr.
  for (const auto& item : root.named_modules(/*name_prefix=*/"", /*include_self=*/false))
    add(*item.value(), item.key());

  for (const auto& [sequential, path] : sequentials) {
    std::size_t index = 0;
    for (auto element = sequential->begin(); element != sequential->end(); ++element, ++index) {
      const std::shared_ptr<torch::nn::Module> module = element->ptr();
      const auto found = named.find(module.get());
      Named element_name;
      if (found != named.end()) {
        element_name = found->second;
      } else {  // registered under another child (replace_module on the Sequential): name it by position
        element_name.path = path.empty() ? std::to_string(index) : path + "." + std::to_string(index);
        element_name.name =
            intern_module_name(std::string(kineto::name::kModulePrefix) + module_type_name(*module) + "_" + element_name.path);
      }
      if (wrap(*element, element_name.name))
        ++result.wrapped;
      else
        result.unwrapped.push_back(element_name.path + " (" + module_type_name(*module) + ")");
    }
  }
  return result;
}

}  // namespace detail

/// Names every module of `model` for its ranges and makes every call of a Sequential element a
/// range, without touching the model's code: "nn.Module: Conv2d_features.0" around each call of
/// features[0]. `model` is a module holder (MnistCnn, torch::nn::Sequential), a shared_ptr to a
/// module or a module. LibTorch's layers are wrapped; name your own element types as template
/// arguments (annotate_modules<ResidualBlockImpl>(model)). Calling it again re-annotates (paths
/// changed, layers added) without wrapping twice. Call it while nothing else uses the model.
template <class... ElementTypes>
ModuleAnnotation annotate_modules(torch::nn::Module& model) {
  static_assert((std::is_base_of_v<torch::nn::Module, ElementTypes> && ...),
                "dlprof::annotate_modules<T...>: each T is a module type (ResidualBlockImpl, not its holder)");
  return detail::annotate_module_tree(
      model, &detail::ElementWrapper<detail::LibTorchLayers, std::remove_cv_t<ElementTypes>...>::wrap);
}

template <class... ElementTypes, class Contained>
ModuleAnnotation annotate_modules(const torch::nn::ModuleHolder<Contained>& model) {
  return annotate_modules<ElementTypes...>(*model.ptr());
}

template <class... ElementTypes, class M, class = std::enable_if_t<std::is_base_of_v<torch::nn::Module, M>>>
ModuleAnnotation annotate_modules(const std::shared_ptr<M>& model) {
  return annotate_modules<ElementTypes...>(static_cast<torch::nn::Module&>(*model));
}

DLPROF_END_NAMESPACE

#if defined(DLPROF_DISABLE)
#  define DLPROF_MODULE(module) static_cast<void>(0)
#else
/// DLPROF_MODULE(this) at the top of a module's forward: a range named after the module
/// ("nn.Module: Block_encoder.layers.2" once annotate_modules(model) has run, "nn.Module: Block"
/// before) to the end of the scope. Also takes a module holder: DLPROF_MODULE(features) around
/// a member's call.
#  define DLPROF_MODULE(module) const ::dlprof::ModuleRange DLPROF_UNIQUE_(dlprof_module_)(module)
#endif
