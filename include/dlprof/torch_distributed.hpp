// dlprof/torch_distributed.hpp: a c10d process group whose collectives are recorded as
// torch.profiler records them (dlprof/collective.hpp), for data-parallel LibTorch trainers under
// mpirun, torchrun or Slurm. Link dlprof::torch.
//
//   auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
//   dlprof::ProfiledProcessGroup group(gloo);      // registered in every trace's distributedInfo
//   group.allreduce(gradients);                    // recorded: record_param_comms + gloo:all_reduce
//
// Each call returns once the collective has completed on this process: the work c10d hands back
// is waited for inside the recorded range, so the range measures the collective as this rank saw
// it, waiting for the others included. (NCCL's wait orders the caller's CUDA stream after the
// collective and returns: there the range is the launch, and the GPU activity, linked to the
// range, holds the NCCL kernel.)
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include <climits>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/collective.hpp"
#include "dlprof/config.hpp"
#include "dlprof/detail/recording/clock.hpp"
#include "dlprof/distributed.hpp"
#include "dlprof/torch.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE

/// A c10d process group whose calls are recorded. `Group` is the type wrapped, deduced from the
/// pointer given: c10d::ProcessGroup, or one backend such as c10d::ProcessGroupGloo or (LibTorch
/// with CUDA) c10d::ProcessGroupNCCL, which LibTorch 2 derives from c10d::Backend.
template <class Group = c10d::ProcessGroup>
class ProfiledProcessGroup {
 public:
  /// Wraps `group`, which is named `name` and `desc` as c10d names groups ("0" and "default_pg" for
  /// the world), and whose members have the global ranks `global_ranks` (empty: 0 to size - 1).
  explicit ProfiledProcessGroup(c10::intrusive_ptr<Group> group, std::string name = "0",
                                std::string desc = "default_pg", std::vector<std::int64_t> global_ranks = {})
      : group_(std::move(group)), name_(std::move(name)), desc_(std::move(desc)), backend_(group_->getBackendName()) {
    if (global_ranks.empty())
      for (int r = 0; r < group_->getSize(); ++r) global_ranks.push_back(r);
    ranks_text_ = fmt::format("[{}]", fmt::join(global_ranks, ", "));
    ProcessGroupInfo info;
    info.name = name_;
    info.desc = desc_;
    info.backend_config = fmt::format("{}:{}", backend_ == "nccl" ? "cuda" : "cpu", backend_);
    info.size = group_->getSize();
    info.ranks = std::move(global_ranks);
    register_process_group(std::move(info));
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& options = c10d::AllreduceOptions()) {
    const std::int64_t elements = numel(tensors);
    return run(call("allreduce", tensors, elements, elements), [&] { return group_->allreduce(tensors, options); });
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& options = c10d::BroadcastOptions()) {
    const std::int64_t elements = numel(tensors);
    return run(call("broadcast", tensors, elements, elements), [&] { return group_->broadcast(tensors, options); });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& options = c10d::AllgatherOptions()) {
    std::int64_t received = 0;
    for (const auto& list : outputs) received += numel(list);
    return run(call("allgather", inputs, numel(inputs), received), [&] { return group_->allgather(outputs, inputs, options); });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& options = c10d::ReduceScatterOptions()) {
    std::int64_t sent = 0;
    for (const auto& list : inputs) sent += numel(list);
    return run(call("reduce_scatter", outputs, sent, numel(outputs)),
               [&] { return group_->reduce_scatter(outputs, inputs, options); });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& options = c10d::BarrierOptions()) {
    const std::vector<at::Tensor> none;
    return run(call("barrier", none, 0, 0), [&] { return group_->barrier(options); });
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int destination, int tag = 0) {
    Collective described = call("send", tensors, numel(tensors), 0);
    described.peer = destination;
    return run(described, [&] { return group_->send(tensors, destination, tag); });
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int source, int tag = 0) {
    Collective described = call("recv", tensors, 0, numel(tensors));
    described.peer = source;
    return run(described, [&] { return group_->recv(tensors, source, tag); });
  }

  /// Estimates this process's clock against `reference`'s (CLOCK_REALTIME, the clock of the
  /// traces) and writes the estimate into the traces written from then on, where dlprof-report
  /// finds it to put the ranks on one clock. Collective: every rank of the group calls it. Each
  /// rank makes `round_trips` round trips with the reference, one rank after another, and keeps
  /// the shortest: the reference reads its clock between receiving and answering, so the offset
  /// is the reference's reading minus the middle of the trip, to within half the trip. `clock`
  /// reads the clock (ns).
  ClockOffset align_clocks(int round_trips = 16, int reference = 0,
                           const std::function<std::int64_t()>& clock = &realtime_ns) {
    ClockOffset offset;
    offset.reference_rank = reference;
    offset.round_trips = round_trips;
    const int me = group_->getRank();
    // NCCL moves GPU tensors only.
    const torch::Device device = backend_ == "nccl" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
    std::vector<at::Tensor> message{torch::zeros({1}, torch::TensorOptions(device).dtype(torch::kInt64))};
    if (me == reference) {
      for (int peer = 0; peer < group_->getSize(); ++peer) {
        if (peer == reference) continue;
        for (int trip = 0; trip < round_trips; ++trip) {
          group_->recv(message, peer, kClockTag)->wait();
          message[0].fill_(clock());
          group_->send(message, peer, kClockTag)->wait();
        }
      }
    } else {
      std::int64_t shortest = INT64_MAX;
      for (int trip = 0; trip < round_trips; ++trip) {
        const std::int64_t sent = clock();
        group_->send(message, reference, kClockTag)->wait();
        group_->recv(message, reference, kClockTag)->wait();
        const std::int64_t received = clock();
        const std::int64_t answered = message[0].item<std::int64_t>();
        if (received - sent < shortest) {
          shortest = received - sent;
          offset.offset_ns = answered - (sent + (received - sent) / 2);
          offset.uncertainty_ns = (received - sent + 1) / 2;
        }
      }
    }
    set_clock_offset(offset);
    return offset;
  }

  Group& group() const noexcept { return *group_; }
  int rank() const { return group_->getRank(); }
  int size() const { return group_->getSize(); }

 private:
  static constexpr int kClockTag = 0x646c70;  // "dlp": apart from the program's own send/recv tags

  static std::int64_t realtime_ns() { return detail::clock_ns(CLOCK_REALTIME); }

  static std::int64_t numel(const std::vector<at::Tensor>& tensors) {
    std::int64_t count = 0;
    for (const at::Tensor& tensor : tensors) count += tensor.numel();
    return count;
  }

  /// The description of a call on `tensors`; its text lives in this object until the next call.
  Collective call(std::string_view name, const std::vector<at::Tensor>& tensors, std::int64_t in, std::int64_t out) {
    dtype_ = tensors.empty() ? std::string("Float") : std::string(c10::toString(tensors.front().scalar_type()));
    Collective described;
    described.name = name;
    described.backend = backend_;
    described.dtype = dtype_;
    described.in_nelems = in;
    described.out_nelems = out;
    described.group_size = group_->getSize();
    described.rank = group_->getRank();
    described.group_name = name_;
    described.group_desc = desc_;
    described.group_ranks = ranks_text_;
    described.seq = seq_++;
    return described;
  }

  template <class Launch>
  c10::intrusive_ptr<c10d::Work> run(const Collective& described, Launch&& launch) {
    // While dlprof observes LibTorch's ops, c10d's own "gloo:all_reduce" op is recorded (on the
    // backend's thread for Gloo), as torch.profiler records it: no range of that name is added.
    const ScopedCollective recorded(described, detail::TorchOpObserver::instance().installed() ? BackendRange::Omit
                                                                                                 : BackendRange::Record);
    c10::intrusive_ptr<c10d::Work> work = launch();
    work->wait();
    return work;
  }

  c10::intrusive_ptr<Group> group_;
  std::string name_;
  std::string desc_;
  std::string backend_;
  std::string ranks_text_;
  std::string dtype_;
  std::int64_t seq_ = 0;
};

DLPROF_END_NAMESPACE
