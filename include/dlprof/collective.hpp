// dlprof/collective.hpp: collectives (all-reduce, broadcast, send, ...) recorded as torch.profiler
// records c10d's: a `record_param_comms` op carrying what the call moved, around a
// `gloo:all_reduce`-style range of category Communication, which is what HTA's and TensorBoard's
// distributed views read (docs/trace-format.md §2.4). The range is an NVTX range too, and while GPU
// activity is recorded the NCCL kernels launched inside it link to it.
//
//   {
//     dlprof::ScopedCollective recorded({"allreduce", "gloo", "Float", numel, numel, world_size, rank});
//     process_group->allreduce(tensors)->wait();
//   }
//
// dlprof/torch_distributed.hpp wraps a c10d process group so that every call is recorded this way.
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/active.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/detail/recording/record.hpp"
#include "dlprof/detail/recording/ring.hpp"
#include "dlprof/detail/recording/site.hpp"
#include "dlprof/category.hpp"
#include "dlprof/range.hpp"

DLPROF_BEGIN_NAMESPACE

/// A collective call as PyTorch's record_param_comms describes it.
struct Collective {
  std::string_view name = {};         ///< c10d's name: "allreduce", "broadcast", "allgather", "reduce_scatter", "barrier", "send", "recv", ...
  std::string_view backend = "gloo";  ///< names the range: "gloo:all_reduce", "nccl:all_reduce"
  std::string_view dtype = "Float";   ///< c10's ScalarType name of the elements
  std::int64_t in_nelems = 0;         ///< elements sent by this rank
  std::int64_t out_nelems = 0;        ///< elements received by this rank
  std::int64_t group_size = 1;
  std::int64_t rank = 0;                        ///< this process's rank in the group
  std::string_view group_name = "0";            ///< c10d's process group name
  std::string_view group_desc = "default_pg";   ///< and description
  std::string_view group_ranks = {};            ///< global ranks of the group, "[0, 1, 2, 3]"; empty: 0 to group_size - 1
  std::string_view in_split = "[]";             ///< all-to-all split sizes
  std::string_view out_split = "[]";
  std::int64_t peer = -1;  ///< send: the destination's rank; recv: the source's
  std::int64_t seq = -1;   ///< the group's sequence number of the call
};

namespace detail {

/// The range's name c10d gives a collective: "gloo:all_reduce" for ("gloo", "allreduce").
inline std::string collective_range_name(std::string_view backend, std::string_view name) {
  std::string_view op = name;
  if (name == "allreduce") op = "all_reduce";
  else if (name == "allgather") op = "all_gather";
  else if (name == "alltoall" || name == "alltoall_base") op = "all_to_all";
  else if (name == "allreduce_coalesced") op = "all_reduce_coalesced";
  return fmt::format("{}:{}", backend.empty() ? "c10d" : backend, op);
}

/// Every field of `call` but its sequence number, which changes at every call (so that the
/// descriptions of a training loop's calls intern to a few names), in the order collective_call()
/// (detail/window/assemble.hpp) reads them; a separator inside a field becomes a space.
inline std::string collective_description(const Collective& call) {
  std::string ranks;
  if (call.group_ranks.empty()) {
    ranks = "[";
    for (std::int64_t r = 0; r < call.group_size; ++r) fmt::format_to(std::back_inserter(ranks), "{}{}", r == 0 ? "" : ", ", r);
    ranks += "]";
  }
  const std::string_view group_ranks = call.group_ranks.empty() ? std::string_view(ranks) : call.group_ranks;
  std::string description;
  const auto text = [&](std::string_view value) {
    for (const char c : value) description += c == kCollectiveFieldSeparator ? ' ' : c;
    description += kCollectiveFieldSeparator;
  };
  const auto number = [&](std::int64_t value) {
    fmt::format_to(std::back_inserter(description), "{}", value);
    description += kCollectiveFieldSeparator;
  };
  text(call.name);
  text(call.backend);
  text(call.dtype);
  number(call.in_nelems);
  number(call.out_nelems);
  number(call.group_size);
  number(call.rank);
  text(call.group_name);
  text(call.group_desc);
  text(group_ranks);
  text(call.in_split);
  text(call.out_split);
  fmt::format_to(std::back_inserter(description), "{}", call.peer);
  return description;
}

}  // namespace detail

/// Whether a ScopedCollective records, inside its op, a range named after the call
/// ("gloo:all_reduce"): a library that records an op of that name itself (c10d's process groups,
/// through LibTorch's RecordFunction) needs none, and a second would count every call twice in
/// TensorBoard's distributed view.
enum class BackendRange : bool { Record, Omit };

/// A collective call on the calling thread, from construction to destruction: while a Profiler
/// records, a `record_param_comms` op (Category::Communication) with `call`'s description and,
/// unless omitted, a range named after the call inside it. Like ScopedRange, it cannot be copied
/// or moved.
class ScopedCollective {
 public:
  explicit ScopedCollective(const Collective& call, BackendRange backend_range = BackendRange::Record) noexcept
      : flags_(detail::active_flags()) {
    if (DLPROF_LIKELY(flags_ == 0)) return;
    try {
      if (flags_ & detail::kRecording) {
        description_ = detail::intern(detail::collective_description(call));
        op_name_ = detail::intern("record_param_comms");
        seq_ = call.seq;
        detail::ThreadRing* ring = detail::current_ring();  // set up before the clock is read, as a range does
        start_ = detail::now_ticks();
        if (ring != nullptr) {
          ring->set_collective_in_progress(detail::intern(detail::collective_range_name(call.backend, call.name)), start_);
          marked_in_progress_ = true;
        }
      }
      if (backend_range == BackendRange::Record)
        range_.emplace(detail::collective_range_name(call.backend, call.name), Category::Communication);
    } catch (...) {  // no memory for the names: the call is not recorded, training goes on
      flags_ = 0;
    }
  }

  ~ScopedCollective() {
    range_.reset();
    if (!(flags_ & detail::kRecording)) return;
    const std::int64_t end = detail::now_ticks();
    if (detail::ThreadRing* ring = detail::t_ring; marked_in_progress_ && ring != nullptr) ring->set_collective_in_progress(0, 0);
    detail::push_event(detail::Event{description_, start_, {seq_}, detail::RecordKind::Collective, Category::Communication});
    detail::push_event(detail::Event{op_name_, start_, {end}, detail::RecordKind::Op, Category::Communication});
  }

  ScopedCollective(const ScopedCollective&) = delete;
  ScopedCollective& operator=(const ScopedCollective&) = delete;
  ScopedCollective(ScopedCollective&&) = delete;
  ScopedCollective& operator=(ScopedCollective&&) = delete;

 private:
  std::uint32_t flags_;
  detail::NameId description_ = 0;
  detail::NameId op_name_ = 0;
  std::int64_t seq_ = -1;
  std::int64_t start_ = 0;
  bool marked_in_progress_ = false;  // this thread's ring holds the call as in progress
  std::optional<ScopedRange> range_;
};

DLPROF_END_NAMESPACE
