#include "host/cuda/cuda_replica.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "host/model/init.hpp"
#include "host/model/params.hpp"
#include "kernels/cuda/fused/classifier_head.hpp"
#include "kernels/cuda/fused/persistent_step.hpp"
#include "kernels/cuda/ops/gather.hpp"
#include "kernels/cuda/ops/loss_watch.hpp"
#include "kernels/cuda/ops/replica_sum.hpp"
#include "kernels/cuda/ops/softmax_xent.hpp"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/thrust/accuracy.hpp"
#include "kernels/cuda/thrust/epoch_order.hpp"

namespace mnistdp {
namespace {

using L = ParamLayout;

constexpr double kMiB = 1024.0 * 1024.0;

// Validates the index and makes the device current; the constructor's first step, so that every member
// allocated after it lands on that device.
int select_device(int device) {
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    throw std::invalid_argument(
        fmt::format("CUDA device {} does not exist ({} visible: 0 to {})", device, count, count - 1));
  }
  CUDA_CHECK(cudaSetDevice(device));
  return device;
}

void check_split(const Dataset& d, const char* which) {
  const auto pixels = static_cast<std::size_t>(L::kInput);
  if (d.count < 0 || d.images.size() != static_cast<std::size_t>(d.count) * pixels ||
      d.labels.size() != static_cast<std::size_t>(d.count)) {
    throw std::invalid_argument(
        fmt::format("CudaReplica: the {} set is malformed ({} images, {} pixel bytes, {} "
                    "labels)",
                    which, d.count, d.images.size(), d.labels.size()));
  }
  const auto bad =
      std::find_if(d.labels.begin(), d.labels.end(), [](std::uint8_t y) { return y >= L::kClasses; });
  if (bad != d.labels.end()) {
    throw std::invalid_argument(fmt::format("CudaReplica: {} label {} at row {} is not a class (0 to {})",
                                            which, static_cast<int>(*bad), bad - d.labels.begin(),
                                            L::kClasses - 1));
  }
}

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& host, cudaStream_t stream) {
  DeviceBuffer<T> dev(host.size());
  if (!host.empty()) {
    CUDA_CHECK(cudaMemcpyAsync(dev.data(), host.data(), dev.bytes(), cudaMemcpyHostToDevice, stream));
  }
  return dev;
}

}  // namespace

StepLaunchWay step_launch_way(const CudaStepOptions& options) {
  if (options.persistent) return StepLaunchWay::persistent;
  if (options.cuda_graphs && options.steps_per_graph > 1) return StepLaunchWay::multi_step_graph;
  if (options.cuda_graphs) return StepLaunchWay::graph_per_step;
  return StepLaunchWay::plain;
}

int count_cuda_devices(std::string& why_none) {
  why_none.clear();
  int count = 0;
  if (const cudaError_t status = cudaGetDeviceCount(&count); status != cudaSuccess) {
    why_none = fmt::format("cudaGetDeviceCount failed: {} ({})", cudaGetErrorName(status),
                           cudaGetErrorString(status));
    static_cast<void>(cudaGetLastError());
    return 0;
  }
  if (count == 0) why_none = "no CUDA device is visible";
  return count;
}

std::vector<CudaDeviceInfo> list_cuda_devices(const std::vector<int>& indices, std::string& why_none) {
  const int count = count_cuda_devices(why_none);
  if (count == 0) return {};
  std::vector<int> wanted = indices;
  if (wanted.empty())
    for (int i = 0; i < count; ++i)
      wanted.push_back(i);
  int current = 0;
  if (const cudaError_t status = cudaGetDevice(&current); status != cudaSuccess) {
    why_none =
        fmt::format("cudaGetDevice failed: {} ({})", cudaGetErrorName(status), cudaGetErrorString(status));
    static_cast<void>(cudaGetLastError());
    return {};
  }
  std::vector<CudaDeviceInfo> devices;
  for (int i : wanted) {
    CudaDeviceInfo info;
    const char* call = "";
    if (const cudaError_t status = query_cuda_device(i, info, &call); status != cudaSuccess) {
      why_none = fmt::format("CUDA device {} did not answer: {} failed: {} ({})", i, call,
                             cudaGetErrorName(status), cudaGetErrorString(status));
      static_cast<void>(cudaGetLastError());
      static_cast<void>(cudaSetDevice(current));
      return {};
    }
    devices.push_back(std::move(info));
  }
  static_cast<void>(cudaSetDevice(current));
  return devices;
}

cudaError_t query_cuda_device(int index, CudaDeviceInfo& info, const char** failed_call) {
  auto fail = [&](cudaError_t status, const char* call) {
    if (failed_call) *failed_call = call;
    return status;
  };
  if (const cudaError_t status = cudaSetDevice(index); status != cudaSuccess)
    return fail(status, "cudaSetDevice");
  cudaDeviceProp prop{};
  if (const cudaError_t status = cudaGetDeviceProperties(&prop, index); status != cudaSuccess)
    return fail(status, "cudaGetDeviceProperties");
  info.index = index;
  info.name = prop.name;
  info.total_memory = prop.totalGlobalMem;
  info.sm_count = prop.multiProcessorCount;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  std::size_t total_bytes = 0;
  if (const cudaError_t status = cudaMemGetInfo(&info.free_memory, &total_bytes); status != cudaSuccess)
    return fail(status, "cudaMemGetInfo");
  return cudaSuccess;
}

CudaReplica::CudaReplica(const DataSplits& data, int device, const CudaStepOptions& options)
    : options_(options), device_(select_device(device)) {
  check_split(data.train, "training");
  check_split(data.test, "test");
  if (options_.steps_per_graph < 1)
    throw std::invalid_argument(fmt::format("CudaReplica: {} steps a graph", options_.steps_per_graph));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  device_name_ = prop.name;
  cc_major_ = prop.major;
  cc_minor_ = prop.minor;
  sm_count_ = prop.multiProcessorCount;
  if (options_.programmatic_launch && cc_major_ < 9) {
    throw std::invalid_argument(fmt::format(
        "programmatic dependent launch (--pdl) needs compute capability 9.0 or newer; cuda:{} {} is sm_{}{}",
        device_, device_name_, cc_major_, cc_minor_));
  }
  if (options_.persistent && !(options_.fused_step && options_.cuda_graphs))
    throw std::invalid_argument("CudaReplica: the persistent kernel runs fused steps, with CUDA graphs on");
  if (options_.persistent) {
    // More blocks than stay resident are refused now rather than at the first step: the grid-wide barrier
    // would wait for blocks that never start. A device without cooperative launches is refused only where
    // the kernel would run: for a lone replica.
    persistent_most_blocks_per_sm_ = cuda::persistent_step_max_blocks_per_sm();
    if (options_.alone && persistent_most_blocks_per_sm_ == 0) {
      throw std::invalid_argument(fmt::format(
          "the persistent kernel (--persistent) needs cooperative launches, which cuda:{} {} does not take "
          "here",
          device_, device_name_));
    }
    const int most = std::max(persistent_most_blocks_per_sm_, 1);
    if (options_.persistent_blocks_per_sm < 1 || options_.persistent_blocks_per_sm > most) {
      throw std::invalid_argument(
          fmt::format("the persistent kernel on cuda:{} {} takes 1 to {} blocks an SM, not {}", device_,
                      device_name_, most, options_.persistent_blocks_per_sm));
    }
  }
  if (options_.tf32 && options_.gemm != GemmImpl::cublas)
    throw std::invalid_argument("TF32 (--tf32) is cuBLAS's: it needs --gemm cublas");
  if (options_.gemm == GemmImpl::cublas) cublas_.emplace(stream_.get(), options_.tf32);

  const cudaStream_t s = stream_.get();
  train_count_ = data.train.count;
  test_count_ = data.test.count;
  train_images_ = upload(data.train.images, s);
  train_labels_ = upload(data.train.labels, s);
  test_images_ = upload(data.test.images, s);
  test_labels_ = upload(data.test.labels, s);
  std::vector<std::int32_t> rows(static_cast<std::size_t>(test_count_));
  std::iota(rows.begin(), rows.end(), 0);
  test_rows_ = upload(rows, s);
  order_ = DeviceBuffer<std::int32_t>(static_cast<std::size_t>(train_count_));
  order_keys_ = DeviceBuffer<std::uint64_t>(static_cast<std::size_t>(train_count_));
  // One order made now, so that Thrust's temporaries are allocated here, counted in device_bytes(), and
  // never during training.
  cuda::epoch_order(order_.data(), order_keys_.data(), train_count_, epoch_shuffle_seed(0, 0),
                    thrust_scratch_, s);
  for (std::size_t i = 0; i < order_staging_.size(); ++i) {
    order_staging_[i] = PinnedBuffer<std::int32_t>(static_cast<std::size_t>(train_count_));
    order_copied_[i].emplace(cudaEventDisableTiming);
  }

  params_ = DeviceBuffer<float>(L::kCount);
  grads_ = DeviceBuffer<float>(L::kGradCount);
  momentum_ = DeviceBuffer<float>(L::kCount);
  // Zeros until the first step, so that a gradient buffer read early holds no garbage.
  CUDA_CHECK(cudaMemsetAsync(params_.data(), 0, params_.bytes(), s));
  CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), s));

  cursor_ = DeviceBuffer<int>(1);
  loss_watch_ = DeviceBuffer<cuda::LossWatch>(1);
  host_watch_ = PinnedBuffer<cuda::LossWatch>(1);
  cuda::start_loss_watch(loss_watch_.data(), 0, s);
  StepKernels kernels;
  kernels.gemm = {options_.gemm, s, cublas_ ? cublas_->get() : nullptr};
  kernels.fused_head = options_.fused_head;
  kernels.fused_step = options_.fused_step;
  kernels.fused_order = fused_order();
  kernels.persistent_blocks = options_.persistent ? sm_count_ * options_.persistent_blocks_per_sm : 0;
  step_.emplace(step_view(), kernels, &timeline_);
  StepLaunchSettings settings;
  settings.steps_per_graph = options_.steps_per_graph;
  launch_ = step_launch_entry(launch_way()).make(*step_, settings);
  plain_ = step_launch_entry(StepLaunchWay::plain).make(*step_, settings);
  ensure_rows(std::max(kInitialRows, std::min(kEvalChunk, std::max(test_count_, 1))));
  const int chunks = (test_count_ + kEvalChunk - 1) / kEvalChunk;
  eval_loss_ = DeviceBuffer<float>(static_cast<std::size_t>(chunks));
  eval_correct_ = DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(test_count_));
  host_loss_ = PinnedBuffer<float>(1);
  stream_.synchronize();  // the uploads read host vectors the caller may free
}

CudaReplica::~CudaReplica() {
  // Members are freed after this body runs; the stream's work must be done and cuBLAS's handle destroyed on
  // its own device.
  if (cudaSetDevice(device_) == cudaSuccess) static_cast<void>(cudaStreamSynchronize(stream_.get()));
}

void CudaReplica::activate() const {
  CUDA_CHECK(cudaSetDevice(device_));
}

void CudaReplica::prepare_access() {
  activate();
  launch_->launch_queued();
}

StepLaunch& CudaReplica::two_call_launch() {
  if (!tracing() && !options_.alone) return *launch_;
  launch_->launch_queued();
  return *plain_;
}

void CudaReplica::ensure_rows(int rows) {
  if (rows <= rows_) return;
  launch_->launch_queued();  // with the buffers they were queued for
  const auto n = static_cast<std::size_t>(rows);
  // Launches in flight may still read the old buffers. Waiting here is cheap: it happens once, at the largest
  // shard (and cudaFree would wait for the device anyway).
  stream_.synchronize();
  // The step graphs hold the old buffers' addresses.
  launch_->drop_graphs();
  x_ = DeviceBuffer<float>(n * L::kInput);
  y_ = DeviceBuffer<std::uint8_t>(n);
  h_ = DeviceBuffer<float>(n * L::kHidden);
  if (keeps_pre_activation(options_.activation)) z_ = DeviceBuffer<float>(n * L::kHidden);
  dh_ = DeviceBuffer<float>(n * L::kHidden);
  logits_ = DeviceBuffer<float>(n * L::kClasses);
  dlogits_ = DeviceBuffer<float>(n * L::kClasses);
  rows_ = rows;
  step_->set_buffers(step_view());
}

std::size_t CudaReplica::device_bytes() const {
  return train_images_.bytes() + train_labels_.bytes() + test_images_.bytes() + test_labels_.bytes() +
         test_rows_.bytes() + order_.bytes() + order_keys_.bytes() + thrust_scratch_.bytes() +
         params_.bytes() + grads_.bytes() + kept_grads_.bytes() + kept_sum_table_.bytes() +
         momentum_.bytes() + x_.bytes() + y_.bytes() + h_.bytes() + z_.bytes() + dh_.bytes() +
         logits_.bytes() + dlogits_.bytes() + cursor_.bytes() + eval_loss_.bytes() + eval_correct_.bytes() +
         loss_watch_.bytes();
}

std::string CudaReplica::description() const {
  // The fused step, several steps a graph and the persistent kernel run a lone replica's whole steps alone.
  // Shards too large for the fused head run the plain launches (in graphs, with graphs on).
  const bool whole_steps = options_.alone && options_.cuda_graphs;
  std::string fused;
  if (options_.fused_step || options_.fused_head) {
    const char* what = !options_.fused_step || !whole_steps ? "fused head"
                       : options_.persistent                ? "fused step, persistent kernel"
                       : options_.programmatic_launch       ? "fused step, programmatic launch"
                                                            : "fused step";
    fused =
        fmt::format(", {} for shards of up to {} rows{}", what, cuda::classifier_head_max_rows(L::kClasses),
                    options_.fused_step && !whole_steps ? " (the fused step needs a lone replica)" : "");
  }
  std::string graphs;
  if (options_.persistent && whole_steps)
    graphs =
        fmt::format(", {} a launch, {} block{} an SM",
                    options_.steps_per_graph == 1 ? std::string("1 step")
                                                  : fmt::format("up to {} steps", options_.steps_per_graph),
                    options_.persistent_blocks_per_sm, options_.persistent_blocks_per_sm == 1 ? "" : "s");
  else if (options_.cuda_graphs && options_.steps_per_graph > 1)
    graphs = whole_steps ? fmt::format(", CUDA graphs of up to {} steps", options_.steps_per_graph)
                         : std::string(", CUDA graphs (several steps a graph need a lone replica)");
  else if (options_.cuda_graphs)
    graphs = ", CUDA graphs";
  return fmt::format("cuda:{} {} (sm_{}{}, {} SMs), gemm {}{}{}, {:.1f} MiB of device memory", device_,
                     device_name_, cc_major_, cc_minor_, sm_count_,
                     fmt::format("{}{}", gemm_impl_name(options_.gemm), options_.tf32 ? " (TF32)" : ""),
                     fused, graphs, static_cast<double>(device_bytes()) / kMiB);
}

void CudaReplica::load_parameters(std::span<const float> params) {
  if (params.size() != L::kCount) {
    throw std::invalid_argument(
        fmt::format("load_parameters: {} values, expected {}", params.size(), L::kCount));
  }
  // Queued steps update the parameters this replaces; a recorded step computes with the parameters it was
  // recorded with.
  prepare_access();
  CUDA_CHECK(
      cudaMemcpyAsync(params_.data(), params.data(), params_.bytes(), cudaMemcpyHostToDevice, stream_.get()));
  synchronize();
}

void CudaReplica::store_parameters(std::span<float> params) {
  if (params.size() != L::kCount) {
    throw std::invalid_argument(
        fmt::format("store_parameters: {} values, expected {}", params.size(), L::kCount));
  }
  prepare_access();
  CUDA_CHECK(
      cudaMemcpyAsync(params.data(), params_.data(), params_.bytes(), cudaMemcpyDeviceToHost, stream_.get()));
  synchronize();
}

void CudaReplica::load_momentum(std::span<const float> momentum) {
  if (!momentum.empty() && momentum.size() != L::kCount) {
    throw std::invalid_argument(
        fmt::format("load_momentum: {} values, expected {}", momentum.size(), L::kCount));
  }
  prepare_access();        // queued steps update the buffer this replaces
  if (momentum.empty()) {  // no buffer yet, as before a first step with momentum
    has_momentum_ = false;
    return;
  }
  CUDA_CHECK(cudaMemcpyAsync(momentum_.data(), momentum.data() + shard_.first(),
                             shard_.count() * sizeof(float), cudaMemcpyHostToDevice, stream_.get()));
  synchronize();
  has_momentum_ = true;
}

void CudaReplica::store_momentum(std::span<float> momentum) {
  if (!has_momentum_) throw std::logic_error("store_momentum: no momentum buffer yet (check has_momentum())");
  if (momentum.size() != L::kCount) {
    throw std::invalid_argument(
        fmt::format("store_momentum: {} values, expected {}", momentum.size(), L::kCount));
  }
  prepare_access();
  // Under ZeRO-1, the shard's values alone, at their places.
  CUDA_CHECK(cudaMemcpyAsync(momentum.data() + shard_.first(), momentum_.data(),
                             shard_.count() * sizeof(float), cudaMemcpyDeviceToHost, stream_.get()));
  synchronize();
}

void CudaReplica::make_epoch_order(std::uint64_t seed, int epoch) {
  prepare_access();  // queued and recorded steps read the order they were given with
  // Queued on the stream after the steps already queued, which read the previous order; nothing waits.
  cuda::epoch_order(order_.data(), order_keys_.data(), train_count_, epoch_shuffle_seed(seed, epoch),
                    thrust_scratch_, stream_.get());
  order_set_ = true;
}

void CudaReplica::set_epoch_order(std::span<const std::int32_t> order) {
  if (order.size() != static_cast<std::size_t>(train_count_)) {
    throw std::invalid_argument(
        fmt::format("set_epoch_order: {} indices for a training set of {}", order.size(), train_count_));
  }
  // An index out of range would make the gather read outside the data set: check here, once per epoch.
  const auto bad =
      std::find_if(order.begin(), order.end(), [&](std::int32_t i) { return i < 0 || i >= train_count_; });
  if (bad != order.end()) {
    throw std::invalid_argument(
        fmt::format("set_epoch_order: index {} at position {} is out of range", *bad, bad - order.begin()));
  }
  prepare_access();  // queued and recorded steps read the order they were given with
  // The copy is ordered on the stream after the steps already queued, which read the previous order.
  if (!order.empty()) {
    PinnedBuffer<std::int32_t>& staging = order_staging_[static_cast<std::size_t>(order_slot_)];
    Event& copied = *order_copied_[static_cast<std::size_t>(order_slot_)];
    copied.synchronize();  // the copy of two orders back, long done when a trainer calls once an epoch
    std::copy(order.begin(), order.end(), staging.data());
    CUDA_CHECK(cudaMemcpyAsync(order_.data(), staging.data(), order_.bytes(), cudaMemcpyHostToDevice,
                               stream_.get()));
    copied.record(stream_.get());
    order_slot_ = 1 - order_slot_;
  }
  order_set_ = true;
}

StepView CudaReplica::step_view() {
  StepView b;
  b.images = train_images_.data();
  b.labels = train_labels_.data();
  b.order = order_.data();
  b.cursor = cursor_.data();
  b.params = params_.data();
  b.grads = grads_.data();
  b.momentum = momentum_.data();
  b.x = x_.data();
  b.y = y_.data();
  b.h = h_.data();
  b.z = z_.data();
  b.dh = dh_.data();
  b.logits = logits_.data();
  b.dlogits = dlogits_.data();
  b.watch = loss_watch_.data();
  b.activation = options_.activation;
  return b;
}

void CudaReplica::check_rows(int first, int count, const char* who) const {
  if (!order_set_)
    throw std::logic_error(fmt::format("{}: no epoch order (make_epoch_order or set_epoch_order) yet", who));
  if (first < 0 || count < 0 || first > train_count_ - count) {
    throw std::out_of_range(fmt::format("{}: rows [{}, {}) outside the training set of {}", who, first,
                                        first + count, train_count_));
  }
}

Replica::ShardBuffers CudaReplica::shard_buffers(int rows) {
  activate();
  ensure_rows(std::max(rows, 1));
  return {params_.data(), logits_.data(), y_.data(), dlogits_.data()};
}

void CudaReplica::forward_logits(int first, int count) {
  check_rows(first, count, "forward_logits");
  prepare_access();
  ensure_rows(std::max(count, 1));
  step_->forward_logits(first, count);
}

void CudaReplica::batch_loss(const float* logits, const std::uint8_t* labels, float* dlogits, int rows,
                             int global_batch) {
  activate();
  step_->batch_loss(logits, labels, dlogits, rows, global_batch);
}

void CudaReplica::backward_from_dlogits(int count) {
  activate();
  step_->backward_from_dlogits(count);
}

void CudaReplica::no_sgd_step() {
  activate();
  timeline_.mark(Mark::sgd, stream_.get());
  timeline_.mark(Mark::sgd_end, stream_.get());
}

void CudaReplica::compute_gradients(int first, int count, int global_batch) {
  check_rows(first, count, "compute_gradients");
  if (global_batch < 1 || count > global_batch) {
    throw std::invalid_argument(
        fmt::format("compute_gradients: global batch {} for a shard of {} rows", global_batch, count));
  }
  activate();
  if (count > 0) ensure_rows(count);
  two_call_launch().compute_gradients(first, count, global_batch);
}

void CudaReplica::sgd_step(const SgdConfig& cfg) {
  shard_.require_whole();
  activate();
  const bool with_momentum = cfg.momentum != 0.0f;
  const bool first_step = with_momentum && !has_momentum_;
  two_call_launch().sgd_step(cfg, first_step);
  if (with_momentum) has_momentum_ = true;
}

bool CudaReplica::step_alone(int first, int count, const SgdConfig& cfg) {
  // The momentum buffer's first step and traced steps run the plain way, through the two calls.
  if (!options_.alone || tracing() || count == 0 || (cfg.momentum != 0.0f && !has_momentum_)) return false;
  check_rows(first, count, "step_alone");
  activate();
  ensure_rows(count);
  return launch_->step_alone(first, count, cfg);
}

float* CudaReplica::gradient_buffer() {
  // The buffer is read (by a communicator, or a test) once the caller has ordered itself after the stream;
  // a recorded step must be on the stream by then.
  if (launch_->holds_steps()) prepare_access();
  return grads_.data();
}

float* CudaReplica::parameter_buffer() {
  prepare_access();  // the communicator orders itself after the stream
  return params_.data();
}

void CudaReplica::sgd_step_shard(const SgdConfig& cfg, std::size_t first, std::size_t count) {
  prepare_access();
  if (shard_.name(first, count)) {
    // The momentum buffer cut down to the shard (what a resumed run loaded there kept).
    DeviceBuffer<float> shard(std::max<std::size_t>(count, 1));
    if (has_momentum_ && count > 0)
      CUDA_CHECK(cudaMemcpyAsync(shard.data(), momentum_.data() + first, count * sizeof(float),
                                 cudaMemcpyDeviceToDevice, stream_.get()));
    stream_.synchronize();  // the old buffer is freed below
    momentum_ = std::move(shard);
    // No launch way may use the whole-buffer momentum any more: the step reads it through the view.
    launch_->drop_graphs();
    step_->set_buffers(step_view());
  }
  const bool with_momentum = cfg.momentum != 0.0f;
  step_->sgd_shard(cfg, with_momentum && !has_momentum_, first, count);
  if (with_momentum) has_momentum_ = true;
}

void CudaReplica::keep_gradients() {
  prepare_access();  // the kept values are those of every step given so far
  if (kept_grads_.size() == 0) {
    // Made at the first accumulated step, once: runs without accumulation never hold it.
    kept_grads_ = DeviceBuffer<float>(L::kGradCount);
    const std::array<const float*, 2> table{grads_.data(), kept_grads_.data()};
    kept_sum_table_ = DeviceBuffer<const float*>(table.size());
    CUDA_CHECK(cudaMemcpyAsync(kept_sum_table_.data(), table.data(), kept_sum_table_.bytes(),
                               cudaMemcpyHostToDevice, stream_.get()));
    stream_.synchronize();  // the host table goes out of scope
  }
  CUDA_CHECK(cudaMemcpyAsync(kept_grads_.data(), grads_.data(), grads_.bytes(), cudaMemcpyDeviceToDevice,
                             stream_.get()));
}

void CudaReplica::add_kept_gradients() {
  if (kept_grads_.size() == 0)
    throw std::logic_error("add_kept_gradients: no gradients kept (keep_gradients first)");
  prepare_access();
  // new + kept, each addition rounded once: the same bits as kept + new, the host's order.
  cuda::sum_in_order(kept_sum_table_.data(), 2, grads_.data(), L::kGradCount, stream_.get());
}

void CudaReplica::trace_steps(long steps) {
  prepare_access();
  timeline_.trace(steps, stream_.get());
}

std::vector<StepMarks> CudaReplica::take_trace() {
  activate();
  synchronize();
  return timeline_.take();
}

void CudaReplica::synchronize() {
  CUDA_CHECK(cudaMemcpyAsync(host_watch_.data(), loss_watch_.data(), loss_watch_.bytes(),
                             cudaMemcpyDeviceToHost, stream_.get()));
  stream_.synchronize();
  seen_watch_ = host_watch_.data()[0];
}

bool CudaReplica::watch_losses(long next_step) {
  prepare_access();  // steps already given are numbered as they were
  cuda::start_loss_watch(loss_watch_.data(), next_step, stream_.get());
  seen_watch_ = cuda::LossWatch{next_step, -1, 0.0f};
  return true;
}

std::optional<NonFiniteLoss> CudaReplica::first_nonfinite_loss() const {
  if (seen_watch_.first_bad < 0) return std::nullopt;
  return NonFiniteLoss{static_cast<long>(seen_watch_.first_bad), seen_watch_.bad_loss_sum};
}

float CudaReplica::loss_sum() {
  prepare_access();
  CUDA_CHECK(cudaMemcpyAsync(host_loss_.data(), grads_.data() + L::kLossSlot, sizeof(float),
                             cudaMemcpyDeviceToHost, stream_.get()));
  synchronize();
  return host_loss_.data()[0];
}

EvalResult CudaReplica::evaluate() {
  EvalResult result;
  result.count = test_count_;
  if (test_count_ == 0) return result;
  prepare_access();  // the parameters after every step so far
  const cudaStream_t s = stream_.get();
  const int chunks = static_cast<int>(eval_loss_.size());
  for (int c = 0; c < chunks; ++c) {
    const int first = c * kEvalChunk;
    const int rows = std::min(kEvalChunk, test_count_ - first);
    cuda::gather_normalize(test_images_.data(), test_labels_.data(), test_rows_.data() + first, x_.data(),
                           y_.data(), rows, L::kInput, s);
    step_->forward(rows);
    cuda::softmax_xent(logits_.data(), y_.data(), nullptr, eval_loss_.data() + c, rows, L::kClasses, 1.0f, s);
    cuda::mark_correct(logits_.data(), y_.data(), eval_correct_.data() + first, rows, L::kClasses,
                       thrust_scratch_, s);
  }
  synchronize();  // a wait like the others: the device's record of the losses is read here too
  // Two reductions over the whole test set, each returning its value to the host.
  result.correct =
      static_cast<long>(cuda::count_marked(eval_correct_.data(), test_count_, thrust_scratch_, s));
  result.loss_sum = cuda::sum_in_double(eval_loss_.data(), chunks, thrust_scratch_, s);
  return result;
}

std::unique_ptr<Replica> make_cuda_replica(const DataSplits& data, int device,
                                           const CudaStepOptions& options) {
  return std::make_unique<CudaReplica>(data, device, options);
}

}  // namespace mnistdp
