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
// it, waiting for the others included.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/collective.hpp"
#include "dlprof/config.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE

class ProfiledProcessGroup {
 public:
  /// Wraps `group`, which is named `name` and `desc` as c10d names groups ("0" and "default_pg" for
  /// the world), and whose members have the global ranks `global_ranks` (empty: 0 to size - 1).
  explicit ProfiledProcessGroup(c10::intrusive_ptr<c10d::ProcessGroup> group, std::string name = "0",
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

  c10d::ProcessGroup& group() const noexcept { return *group_; }
  int rank() const { return group_->getRank(); }
  int size() const { return group_->getSize(); }

 private:
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
    const ScopedCollective recorded(described);
    c10::intrusive_ptr<c10d::Work> work = launch();
    work->wait();
    return work;
  }

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::string name_;
  std::string desc_;
  std::string backend_;
  std::string ranks_text_;
  std::string dtype_;
  std::int64_t seq_ = 0;
};

DLPROF_END_NAMESPACE
