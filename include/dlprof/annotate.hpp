// dlprof/annotate.hpp: ranges around code you do not edit ("monkey-patch style"), named the way
// torch.profiler names them so TensorBoard's and HTA's categories recognise them:
//
//   for (auto& batch : dlprof::annotate(*loader)) { ... }   // each fetch: "enumerate(DataLoader)#StatelessDataLoader.__next__"
//   auto optimizer = dlprof::annotate(sgd);                  // "Optimizer.step#SGD.step", "Optimizer.zero_grad#SGD.zero_grad"
//   optimizer.zero_grad(); ...; optimizer.step();
//   auto forward = dlprof::wrap("forward", [&](auto& x) { return model->forward(x); });
//   auto y = forward(x);                                     // same arguments, same result, inside a range
//
// `annotate` takes anything iterable (torch::data loaders, containers, generators with
// begin()/end()) or anything with step() and zero_grad() (torch::optim optimizers). The proxies
// hold a reference: the annotated object must outlive them. Names are computed once, when the
// proxy is made; each range costs what a ScopedRange with a run-time name costs (an intern-cache
// lookup while recording, one relaxed load otherwise).
#pragma once

#include <cxxabi.h>

#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "dlprof/config.hpp"
#include "dlprof/category.hpp"
#include "dlprof/format/vocabulary.hpp"
#include "dlprof/range.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// The unqualified name of a type without its template arguments, as Python prints a class:
/// torch::data::StatelessDataLoader<...> -> "StatelessDataLoader", torch::optim::SGD -> "SGD".
inline std::string short_type_name(const std::type_info& type) {
  int status = 0;
  char* const demangled = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string name;
  try {
    name = status == 0 && demangled != nullptr ? demangled : type.name();
  } catch (...) {
    std::free(demangled);
    throw;
  }
  std::free(demangled);
  // Cut the template arguments: everything from the first '<' at nesting depth 0.
  if (const std::size_t open = name.find('<'); open != std::string::npos) name.erase(open);
  if (const std::size_t scope = name.rfind("::"); scope != std::string::npos) name.erase(0, scope + 2);
  return name;
}

/// std::invoke without <functional>, which would double what annotating a file costs to compile:
/// a member pointer applied to an object (or a pointer to one), or a call.
template <class Callable, class... Args>
decltype(auto) invoke(Callable&& callable, Args&&... args) {
  return std::forward<Callable>(callable)(std::forward<Args>(args)...);
}
template <class Class, class Member, class Object, class... Args>
decltype(auto) invoke(Member Class::*member, Object&& object, Args&&... args) {
  decltype(auto) target = [&]() -> decltype(auto) {
    if constexpr (std::is_pointer_v<std::decay_t<Object>>)
      return *object;
    else
      return std::forward<Object>(object);
  }();
  if constexpr (std::is_function_v<Member>)
    return (std::forward<decltype(target)>(target).*member)(std::forward<Args>(args)...);
  else
    return std::forward<decltype(target)>(target).*member;
}

template <class T, class = void>
struct is_iterable : std::false_type {};
template <class T>
struct is_iterable<T, std::void_t<decltype(std::begin(std::declval<T&>())), decltype(std::end(std::declval<T&>()))>>
    : std::true_type {};

template <class T, class = void>
struct is_optimizer : std::false_type {};
template <class T>
struct is_optimizer<T, std::void_t<decltype(std::declval<T&>().step()), decltype(std::declval<T&>().zero_grad())>>
    : std::true_type {};

}  // namespace detail

/// A callable that runs another inside a range. Arguments are forwarded and the result returned
/// exactly as the wrapped callable gives them (references stay references).
template <class Callable>
class Wrapped {
 public:
  Wrapped(std::string name, Callable callable, Category category)
      : name_(std::move(name)), callable_(std::move(callable)), category_(category) {}

  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    const ScopedRange range(name_, category_);
    return detail::invoke(callable_, std::forward<Args>(args)...);
  }
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    const ScopedRange range(name_, category_);
    return detail::invoke(callable_, std::forward<Args>(args)...);
  }

  const std::string& name() const noexcept { return name_; }

 private:
  std::string name_;
  Callable callable_;
  Category category_;
};

/// `callable` inside a range named `name` at every call.
template <class Callable>
Wrapped<std::decay_t<Callable>> wrap(std::string name, Callable&& callable, Category category = Category::User) {
  return Wrapped<std::decay_t<Callable>>(std::move(name), std::forward<Callable>(callable), category);
}

/// An iterable whose every fetch (begin() and each ++) is a DataLoader range named
/// "enumerate(DataLoader)#<Loader>.__next__", the name TensorBoard's plugin counts as DataLoader.
/// torch::data loaders fetch their first batch in begin() and the next ones in ++.
template <class Loader>
class AnnotatedLoader {
  using UnderlyingIterator = decltype(std::begin(std::declval<Loader&>()));
  using UnderlyingSentinel = decltype(std::end(std::declval<Loader&>()));

 public:
  class iterator {
   public:
    using difference_type = std::ptrdiff_t;
    using value_type = typename std::iterator_traits<UnderlyingIterator>::value_type;
    using reference = decltype(*std::declval<UnderlyingIterator&>());
    using pointer = void;
    using iterator_category = std::input_iterator_tag;

    iterator(UnderlyingIterator position, const std::string* range_name)
        : position_(std::move(position)), range_name_(range_name) {}

    reference operator*() const { return *position_; }
    iterator& operator++() {
      const ScopedRange range(*range_name_, Category::DataLoader);
      ++position_;
      return *this;
    }
    friend bool operator==(const iterator& a, const iterator& b) { return a.position_ == b.position_; }
    friend bool operator!=(const iterator& a, const iterator& b) { return !(a == b); }
    friend bool operator==(const iterator& a, const UnderlyingSentinel& end) { return a.position_ == end; }
    friend bool operator!=(const iterator& a, const UnderlyingSentinel& end) { return !(a.position_ == end); }

   private:
    // Mutable: torch::data::Iterator's operator== is a non-const member.
    mutable UnderlyingIterator position_;
    const std::string* range_name_;
  };

  AnnotatedLoader(Loader& loader, std::string loader_name)
      : loader_(loader),
        range_name_(std::string(kineto::name::kDataLoaderPrefix) + std::move(loader_name) +
                    std::string(kineto::name::kDataLoaderNextSuffix)) {}

  iterator begin() {
    const ScopedRange range(range_name_, Category::DataLoader);
    return iterator(std::begin(loader_), &range_name_);
  }
  UnderlyingSentinel end() { return std::end(loader_); }

  const std::string& range_name() const noexcept { return range_name_; }

 private:
  Loader& loader_;
  std::string range_name_;
};

namespace detail {

/// What an annotated optimizer says about its memory after each step (tag_memory()): nothing,
/// unless a framework's header specializes this for its optimizers, as dlprof/torch.hpp does for
/// torch::optim's. Include that header wherever such an optimizer is annotated.
template <class Optimizer, class = void>
struct OptimizerMemoryTags {
  static void tag(const Optimizer&) noexcept {}
};

}  // namespace detail

/// An optimizer whose step() and zero_grad() are Optimizer ranges named as torch.profiler names
/// them ("Optimizer.step#SGD.step"). Everything else is reached through -> or get().
template <class Optimizer>
class AnnotatedOptimizer {
 public:
  AnnotatedOptimizer(Optimizer& optimizer, const std::string& optimizer_name)
      : optimizer_(optimizer),
        step_name_(std::string(kineto::name::kOptimizerStepPrefix) + optimizer_name +
                   std::string(kineto::name::kOptimizerStepSuffix)),
        zero_grad_name_(std::string(kineto::name::kOptimizerZeroGradPrefix) + optimizer_name +
                        std::string(kineto::name::kOptimizerZeroGradSuffix)) {}

  /// The step, in its range; then, still inside it, what the optimizer's memory holds.
  template <class... Args>
  decltype(auto) step(Args&&... args) {
    const ScopedRange range(step_name_, Category::Optimizer);
    const TagsAfterStep tags{optimizer_};
    return optimizer_.step(std::forward<Args>(args)...);
  }
  template <class... Args>
  decltype(auto) zero_grad(Args&&... args) {
    const ScopedRange range(zero_grad_name_, Category::Optimizer);
    return optimizer_.zero_grad(std::forward<Args>(args)...);
  }

  Optimizer* operator->() const noexcept { return &optimizer_; }
  Optimizer& get() const noexcept { return optimizer_; }
  const std::string& step_range_name() const noexcept { return step_name_; }
  const std::string& zero_grad_range_name() const noexcept { return zero_grad_name_; }

 private:
  struct TagsAfterStep {
    const Optimizer& optimizer;
    ~TagsAfterStep() { detail::OptimizerMemoryTags<Optimizer>::tag(optimizer); }
  };

  Optimizer& optimizer_;
  std::string step_name_;
  std::string zero_grad_name_;
};

/// Annotates a data loader (anything iterable) or an optimizer (anything with step() and
/// zero_grad()), named after its type; `name` overrides the type's name.
template <class Annotated>
auto annotate(Annotated& annotated, std::string name = {}) {
  static_assert(detail::is_iterable<Annotated>::value || detail::is_optimizer<Annotated>::value,
                "dlprof::annotate takes a data loader (begin()/end()) or an optimizer (step() and zero_grad()); "
                "wrap other callables with dlprof::wrap(name, callable)");
  if (name.empty()) name = detail::short_type_name(typeid(Annotated));
  if constexpr (detail::is_iterable<Annotated>::value)
    return AnnotatedLoader<Annotated>(annotated, std::move(name));
  else
    return AnnotatedOptimizer<Annotated>(annotated, name);
}

DLPROF_END_NAMESPACE
