// mnist-dp-bench: times every CUDA kernel of a training step and every GEMM version, at the training shapes
// and on a sweep of larger sizes, beside cuBLAS, against ceilings measured in the same run. Each version is
// checked against the CPU reference (mnistdp::ref) before it is timed; one that disagrees is reported FAIL
// and not timed.
//
//   mnist-dp-bench [--quick] [--filter TEXT] [--json FILE] [--device N] [--repeats N] [--list] [--check-only]
//   mnist-dp-bench --epoch [--epoch-gemm NAME] [--epoch-steps N] [--rounds N] [--repeats N] [--json FILE]
//                  [--device N] [--check-only]
//
// --epoch times whole training epochs instead, launched the plain way and replayed as CUDA graphs
// (epoch_bench.hpp). --check-only runs every selected benchmark with its checks, each mode launched as few
// times as the timing allows, and reports no time: a rehearsal of a GPU run, which emulated devices may take.
//
// Exit status: 0 when every check passed, 1 when one failed or a call failed, 77 when no GPU is usable.
// docs/benchmarks.md says what each column means.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_common.hpp"
#include "bench/bench_device.hpp"
#include "bench/epoch_bench.hpp"
#include "host/cuda/fused_kernels.hpp"
#include "host/model/params.hpp"
#include "kernels/cuda/gemm/gemm.hpp"
#include "kernels/cuda/ops/gather.hpp"
#include "kernels/cuda/ops/linear.hpp"
#include "kernels/cuda/ops/sgd.hpp"
#include "kernels/cuda/ops/softmax_xent.hpp"
#include "kernels/cuda/runtime/check.hpp"
#include "kernels/cuda/runtime/memory.hpp"
#include "kernels/cuda/thrust/accuracy.hpp"
#include "kernels/cuda/thrust/scratch.hpp"
#include "kernels/ref/gather.hpp"
#include "kernels/ref/linear.hpp"
#include "kernels/ref/sgd.hpp"
#include "kernels/ref/softmax_xent.hpp"

namespace mnistdp::bench {
namespace {

constexpr const char* kProgram = "mnist-dp-bench";
constexpr int kIn = ParamLayout::kInput;
constexpr int kHid = ParamLayout::kHidden;
constexpr int kOut = ParamLayout::kClasses;
constexpr int kGlobalBatch = 64;
constexpr int kTrainImages = 60000;
constexpr std::size_t kAlign = 64;  // floats: every operand of a buffer set starts on a 256-byte boundary

std::size_t align_up(std::size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}
std::size_t sz(long n) {
  return static_cast<std::size_t>(n);
}

struct Options {
  bool quick = false;
  bool list = false;
  std::string filter;
  std::string json_path;
  int device = 0;
  int repeats = 0;  // 0: 25, or 7 with --quick (10 epochs with --epoch)
  bool epoch = false;
  std::string epoch_gemm = "blocked";
  int rounds = 3;
  int epoch_steps = 0;      // with --epoch: at most this many steps an epoch; 0: every step
  bool check_only = false;  // check and launch everything, time nothing (kCheckOnlyTiming)
};

// What one launch of an operation does, counted by hand: floating-point operations, the bytes it must move at
// the least (each operand read once, each result written once), and the kernel launches it takes.
struct Work {
  double flops = 0.0;
  double bytes = 0.0;
  int launches = 1;
  Work& operator+=(const Work& o) {
    flops += o.flops;
    bytes += o.bytes;
    launches += o.launches;
    return *this;
  }
};

// The outcome of comparing a device result with the reference.
struct Check {
  bool ok = true;
  double ratio = 0.0;  // the largest |device - reference| / tolerance over the elements checked (<= 1 passes)
  std::string detail;  // where it failed
  std::size_t bad = 0;  // the index of the first element out of tolerance
};

// One benchmark: an operation in one implementation, with its check and its launches.
struct Bench {
  Bench(std::string g, std::string o, std::string i, std::string s)
      : group(std::move(g)), op(std::move(o)), impl(std::move(i)), shape(std::move(s)) {}

  std::string group;  // "train-b64", "sweep", "kernel", "step-b64"
  std::string op;     // "fc1.fwd"
  std::string impl;   // "blocked"
  std::string shape;  // for people: "64x784 -> 256"
  Work work;
  std::function<Check()> validate;
  LaunchFn hot;   // on buffer set 0 every time
  LaunchFn cold;  // rotating through buffer sets larger than twice the L2; empty when there are none
  bool graph = false;
  int sets = 1;

  std::string id() const { return group + "/" + op + "/" + impl; }
};

struct Result {
  explicit Result(const Bench& b)
      : group(b.group), op(b.op), impl(b.impl), shape(b.shape), work(b.work), cold_sets(b.sets) {}

  std::string group, op, impl, shape;
  Work work;
  std::string check = "ok";
  double error_ratio = 0.0;
  int cold_sets = 1;
  std::optional<Stats> hot, cold, graph;
  std::vector<std::string> launched;  // the modes launched after the check ("hot", "cold", "graph")
};

struct Ceilings {
  int sgemm_n = 0;
  Stats sgemm;
  double sgemm_gflops = 0.0;
  std::size_t copy_bytes = 0;
  Stats copy;
  double copy_gbs = 0.0;  // bytes read + bytes written per second, as the rows count them
  Stats empty_stream;
  Stats empty_graph;
  Stats empty_sync;  // host clock: launch, then cudaStreamSynchronize
  // A grid-wide barrier of a persistent kernel (one block per SM): the time of a launch that crosses
  // kGridBarriers of them, per barrier.
  Stats grid_barrier;
  int grid_barrier_blocks = 0;
  std::string grid_barrier_error;  // why it was not measured, if it was not
};

constexpr int kGridBarriers = 1000;
// The ceilings' sizes in a check-only run: each path launched, at a size that takes an emulated device
// moments (the figures are thrown away).
constexpr int kCheckOnlySgemm = 64;
constexpr std::size_t kCheckOnlyCopyBytes = std::size_t{1} << 20;
constexpr int kCheckOnlyGridBarriers = 2;

// ------------------------------------------------------------------------------------------------ checks

// A float is within tolerance of the reference; a NaN matches only a NaN.
bool close(float got, float want, double tol, double& ratio) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  const double err = std::fabs(static_cast<double>(got) - static_cast<double>(want));
  if (tol > 0.0)
    ratio = std::max(ratio, err / tol);
  else if (err > 0.0)
    ratio = std::numeric_limits<double>::infinity();
  return err <= tol;
}

// got and want: [n]; tol(i) the tolerance of element i.
Check compare(const float* got, const float* want, std::size_t n,
              const std::function<double(std::size_t)>& tol, const char* what) {
  Check c;
  for (std::size_t i = 0; i < n; ++i) {
    if (!close(got[i], want[i], tol(i), c.ratio) && c.ok) {
      c.ok = false;
      c.bad = i;
      c.detail = fmt::format("{}[{}] = {} where the reference has {}", what, i, got[i], want[i]);
    }
  }
  return c;
}

Check merge(Check a, const Check& b) {
  a.ratio = std::max(a.ratio, b.ratio);
  if (a.ok && !b.ok) {
    a.ok = false;
    a.detail = b.detail;
  }
  return a;
}

// Copies for the checks, synchronised with the whole device: the benchmarks launch on a non-blocking stream,
// which a plain cudaMemcpy (on the legacy default stream) does not wait for, and a copy from pageable memory
// may return before its data has reached the device.
template <typename T>
std::vector<T> to_host(const T* device, std::size_t n) {
  std::vector<T> host(n);
  CUDA_CHECK(cudaDeviceSynchronize());
  if (n) CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

template <typename T>
void to_device(T* device, const std::vector<T>& host) {
  CUDA_CHECK(cudaDeviceSynchronize());
  if (!host.empty())
    CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaDeviceSynchronize());
}

// Runs body(first, last) over [0, n) in pieces on the host's cores: the reference is plain loops, and the
// sweep's large products would take minutes on one core.
void parallel_for(int n, const std::function<void(int, int)>& body) {
  const int threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 32);
  const int per = std::max(1, (n + threads - 1) / threads);
  std::vector<std::thread> pool;
  std::exception_ptr error;
  std::mutex m;
  for (int first = 0; first < n; first += per) {
    const int last = std::min(n, first + per);
    pool.emplace_back([&, first, last] {
      try {
        body(first, last);
      } catch (...) {
        const std::lock_guard lock(m);
        error = std::current_exception();
      }
    });
  }
  for (auto& t : pool)
    t.join();
  if (error) std::rethrow_exception(error);
}

// --------------------------------------------------------------------------------------------- GEMM cases

// The three orientations of a linear layer's products (kernels/cuda/ops/linear.cu):
//   fwd  C[m, n] = A[m, k] B[n, k]^T   (+ bias, ReLU)      y  = x w^T + b
//   dw   C[m, n] = A[k, m]^T B[k, n]                       dw = dy^T x
//   dx   C[m, n] = A[m, k] B[k, n]     (x ReLU mask)       dx = dy w
enum class Orient { fwd, dw, dx };

struct GemmCase {
  std::string group;
  std::string op;
  Orient orient = Orient::fwd;
  int m = 0, n = 0, k = 0;
  bool bias = false, relu = false, mask = false;
  bool timed_hot = true;  // training shapes: hot, cold and graph; the sweep: cold only
  bool timed_graph = true;

  bool epilogue() const { return bias || relu || mask; }
  std::size_t a_count() const { return sz(m) * sz(k); }
  std::size_t b_count() const { return sz(k) * sz(n); }
  std::size_t c_count() const { return sz(m) * sz(n); }
  std::string shape() const {
    switch (orient) {
      case Orient::fwd:
        return fmt::format("{}x{} -> {}{}", m, k, n, relu ? " +b relu" : " +b");
      case Orient::dw:
        return fmt::format("dW {}x{} over {}", m, n, k);
      case Orient::dx:
        return fmt::format("dX {}x{} from {}{}", m, n, k, mask ? " mask" : "");
    }
    return {};
  }
  Work work(bool with_epilogue) const {
    Work w;
    w.flops = 2.0 * m * n * static_cast<double>(k);
    std::size_t floats = a_count() + b_count() + c_count();
    if (with_epilogue && bias) floats += sz(n);
    if (with_epilogue && mask) floats += c_count();
    w.bytes = 4.0 * static_cast<double>(floats);
    return w;
  }
};

// One buffer set of a GEMM case: every operand, each aligned, in one slab of `sets` such sets.
struct GemmBuffers {
  std::size_t a = 0, b = 0, c = 0, bias = 0, mask = 0, stride = 0;  // offsets in floats
  int sets = 1;
  DeviceBuffer<float> slab;

  // max_sets: at most this many sets (a check-only run, which times nothing, rotates over 2).
  GemmBuffers(const GemmCase& g, std::size_t l2, bool rotate, int max_sets) {
    std::size_t at = 0;
    a = at;
    at += align_up(g.a_count());
    b = at;
    at += align_up(g.b_count());
    c = at;
    at += align_up(g.c_count());
    bias = at;
    at += align_up(sz(g.n));
    mask = at;
    at += g.mask ? align_up(g.c_count()) : 0;
    stride = at;
    const std::size_t set_bytes = stride * sizeof(float);
    if (rotate && set_bytes < 2 * l2) {
      // Enough sets that the working set is twice the L2 (at most 1 GiB in all).
      const std::size_t want = (2 * l2 + set_bytes - 1) / set_bytes;
      sets = static_cast<int>(std::min<std::size_t>(want, (std::size_t{1} << 30) / set_bytes));
      sets = std::clamp(sets, 1, max_sets);
    }
    slab = DeviceBuffer<float>(stride * sz(sets));
  }

  cuda::GemmProblem problem(const GemmCase& g, int set, bool with_epilogue) {
    float* base = slab.data() + stride * sz(set);
    cuda::GemmProblem p;
    p.m = g.m;
    p.n = g.n;
    p.k = g.k;
    p.a = base + a;
    p.b = base + b;
    p.c = base + c;
    p.ldc = g.n;
    switch (g.orient) {
      case Orient::fwd:
        p.lda = g.k;
        p.ldb = g.k;
        p.trans_b = true;
        break;
      case Orient::dw:
        p.lda = g.m;
        p.trans_a = true;
        p.ldb = g.n;
        break;
      case Orient::dx:
        p.lda = g.k;
        p.ldb = g.n;
        break;
    }
    if (with_epilogue) {
      p.bias = g.bias ? base + bias : nullptr;
      p.relu = g.relu;
      p.mask = g.mask ? base + mask : nullptr;
    }
    return p;
  }
};

// The reference of a GEMM case on the rows of C it checks (all of them, or three slices of a large C),
// computed with ref::linear_forward / ref::linear_backward on the host copies of buffer set 0.
struct GemmReference {
  std::vector<int> rows;     // the rows of C checked
  std::vector<float> value;  // [rows, n]
  std::vector<float> tol;    // [rows, n]
};

class GemmCheck {
 public:
  // From the operands of buffer set 0 on the device.
  GemmCheck(const GemmCase& g, GemmBuffers& buf)
      : GemmCheck(g, to_host(buf.slab.data() + buf.a, g.a_count()),
                  to_host(buf.slab.data() + buf.b, g.b_count()), to_host(buf.slab.data() + buf.bias, sz(g.n)),
                  g.mask ? to_host(buf.slab.data() + buf.mask, g.c_count()) : std::vector<float>{}) {}

  // From host operands: a [a_count], b [b_count], bias [n], mask [m, n] (or empty without a mask).
  GemmCheck(const GemmCase& g, std::vector<float> a, std::vector<float> b, std::vector<float> bias,
            std::vector<float> mask)
      : g_(g), a_(std::move(a)), b_(std::move(b)), bias_(std::move(bias)), mask_(std::move(mask)) {
    // Rows checked: every row while the reference is cheap, else 32 at the top, middle and bottom of C (every
    // column is checked, and the first, a middle and the last row tiles of every version).
    const double fma = static_cast<double>(g.m) * g.n * static_cast<double>(g.k);
    if (fma <= 3e8 || g.m <= 96) {
      for (int r = 0; r < g.m; ++r)
        rows_.push_back(r);
    } else {
      for (int start : {0, g.m / 2 - 16, g.m - 32})
        for (int r = start; r < start + 32; ++r)
          rows_.push_back(r);
    }
  }

  // device_c: C of buffer set 0 after one launch.
  Check operator()(const float* device_c, bool with_epilogue) {
    std::vector<float> got(rows_.size() * sz(g_.n));
    CUDA_CHECK(cudaDeviceSynchronize());
    for (std::size_t i = 0; i < rows_.size(); ++i)
      CUDA_CHECK(cudaMemcpy(got.data() + i * sz(g_.n), device_c + sz(rows_[i]) * sz(g_.n),
                            sz(g_.n) * sizeof(float), cudaMemcpyDeviceToHost));
    return check_rows(got, with_epilogue);
  }

  // got: [rows(), n], the rows of C that rows() names, in that order.
  Check check_rows(const std::vector<float>& got, bool with_epilogue) {
    std::optional<GemmReference>& ref = with_epilogue ? with_ : without_;
    if (!ref) ref = compute(with_epilogue);
    Check c = compare(
        got.data(), ref->value.data(), got.size(), [&](std::size_t i) { return ref->tol[i]; }, "C");
    if (!c.ok) {
      // Name the row and column of C rather than the index among the rows checked.
      const std::size_t row = sz(rows_[c.bad / sz(g_.n)]), col = c.bad % sz(g_.n);
      c.detail = fmt::format("C[{}, {}] = {} where the reference has {} (tolerance {:.3g})", row, col,
                             got[c.bad], ref->value[c.bad], ref->tol[c.bad]);
    }
    return c;
  }

  const std::vector<int>& rows() const { return rows_; }

 private:
  // op(A)[i, j] and op(B)[i, j] of the case, from the host copies.
  float op_a(int i, int j) const {
    return g_.orient == Orient::dw ? a_[sz(j) * sz(g_.m) + sz(i)] : a_[sz(i) * sz(g_.k) + sz(j)];
  }
  float op_b(int i, int j) const {
    return g_.orient == Orient::fwd ? b_[sz(j) * sz(g_.k) + sz(i)] : b_[sz(i) * sz(g_.n) + sz(j)];
  }

  GemmReference compute(bool with_epilogue) const {
    const int n = g_.n, k = g_.k;
    const bool bias = with_epilogue && g_.bias;
    const bool relu = with_epilogue && g_.relu;
    const bool mask = with_epilogue && g_.mask;
    GemmReference r;
    r.rows = rows_;
    r.value.resize(rows_.size() * sz(n));
    r.tol.resize(rows_.size() * sz(n));
    const std::vector<float> zero_bias(sz(n), 0.0f);
    const float* b_vec = bias ? bias_.data() : zero_bias.data();
    // The rows come in runs of consecutive indices; each run is one call of the reference on a slice of C.
    std::vector<std::pair<int, int>> runs;  // [first row, row count) and the index of its first in rows_
    std::vector<int> run_at;
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      if (i == 0 || rows_[i] != rows_[i - 1] + 1) {
        runs.push_back({rows_[i], 0});
        run_at.push_back(static_cast<int>(i));
      }
      ++runs.back().second;
    }
    // Split the runs into pieces of at most 8 rows, computed in parallel.
    struct Piece {
      int row, count, at;
    };
    std::vector<Piece> pieces;
    for (std::size_t j = 0; j < runs.size(); ++j)
      for (int off = 0; off < runs[j].second; off += 8)
        pieces.push_back({runs[j].first + off, std::min(8, runs[j].second - off), run_at[j] + off});
    parallel_for(static_cast<int>(pieces.size()), [&](int first, int last) {
      std::vector<float> dw_tmp, db_tmp, a_sub, x_rows;
      for (int p = first; p < last; ++p) {
        const Piece& piece = pieces[sz(p)];
        float* out = r.value.data() + sz(piece.at) * sz(n);
        switch (g_.orient) {
          case Orient::fwd:
            ref::linear_forward(a_.data() + sz(piece.row) * sz(k), b_.data(), b_vec, out, {piece.count, k, n},
                                relu);
            break;
          case Orient::dw: {
            // Rows of dW are columns of dy: gather them into a compact [k, count] dy.
            a_sub.resize(sz(k) * sz(piece.count));
            for (int kk = 0; kk < k; ++kk)
              for (int c = 0; c < piece.count; ++c)
                a_sub[sz(kk) * sz(piece.count) + sz(c)] = a_[sz(kk) * sz(g_.m) + sz(piece.row + c)];
            db_tmp.resize(sz(piece.count));
            ref::linear_backward(a_sub.data(), b_.data(), nullptr, out, db_tmp.data(), nullptr,
                                 {k, n, piece.count}, false);
            break;
          }
          case Orient::dx: {
            const float* x = nullptr;
            if (g_.mask) {
              x = mask_.data() + sz(piece.row) * sz(n);
            } else {
              x_rows.assign(sz(piece.count) * sz(n), 1.0f);  // no mask: any x will do (relu_mask is false)
              x = x_rows.data();
            }
            dw_tmp.resize(sz(k) * sz(n));
            db_tmp.resize(sz(k));
            ref::linear_backward(a_.data() + sz(piece.row) * sz(k), x, b_.data(), dw_tmp.data(),
                                 db_tmp.data(), out, {piece.count, n, k}, mask);
            break;
          }
        }
      }
    });
    // Tolerance of C[i, j]: both the reference and the device sum k products in float, each within
    // (k + 2) eps sum_l |op(A)[i, l]| |op(B)[l, j]| of the exact value (plus the bias's rounding); that sum
    // is bounded by rowabs_i * colmax_j, cheap to compute. Twice that bounds their difference. A wrong index
    // or a missing tile is off by a whole term, far outside it.
    std::vector<double> colmax(sz(n), 0.0);
    for (int l = 0; l < k; ++l)
      for (int j = 0; j < n; ++j)
        colmax[sz(j)] = std::max(colmax[sz(j)], static_cast<double>(std::fabs(op_b(l, j))));
    const double eps = std::numeric_limits<float>::epsilon();
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      double rowabs = 0.0;
      for (int l = 0; l < k; ++l)
        rowabs += std::fabs(op_a(rows_[i], l));
      for (int j = 0; j < n; ++j)
        r.tol[i * sz(n) + sz(j)] = static_cast<float>(
            2.0 * (k + 2) * eps * (rowabs * colmax[sz(j)] + (bias ? std::fabs(bias_[sz(j)]) : 0.0)) + 1e-30);
    }
    return r;
  }

  GemmCase g_;
  std::vector<float> a_, b_, bias_, mask_;
  std::vector<int> rows_;
  std::optional<GemmReference> with_, without_;
};

// The implementations timed: the project's three versions and cuBLAS through the project's launcher
// (cublasSgemm, then the epilogue as its own kernel), plus cublasSgemm alone where there is an epilogue (the
// product only: what cuBLAS costs without the work the custom kernels fuse in).
struct ImplChoice {
  std::string name;
  GemmImpl impl;
  bool epilogue;
};

// The whole-step benchmarks: every GEMM, and the fused classifier head with the hand-written GEMMs it
// matches that are candidates for the fast path.
struct StepVariant {
  GemmImpl impl;
  bool fused_head;
  bool fused_step = false;    // the fused step's three kernels (its GEMM is v4's tiling, whatever impl says)
  bool programmatic = false;  // the fused step with programmatic dependent launch
  bool persistent = false;    // the fused step as the persistent kernel, one step a launch
  std::string name() const {
    if (persistent) return "persistent";
    if (fused_step) return programmatic ? "fused-step+pdl" : "fused-step";
    return std::string(gemm_impl_name(impl)) + (fused_head ? "+head" : "");
  }
};
// Every GEMM version's plain step (kGemmVersions, kernels/cuda/gemm/gemm_version.hpp), then the fused ones.
const std::vector<StepVariant> kStepVariants = [] {
  std::vector<StepVariant> v;
  for (const GemmVersion& version : kGemmVersions)
    v.push_back({version.impl, false});
  v.insert(v.end(), {{GemmImpl::blocked, true},
                     {GemmImpl::slab, true},
                     {GemmImpl::slab, true, true},
                     {GemmImpl::slab, true, true, true},
                     {GemmImpl::slab, true, true, false, true}});
  return v;
}();

std::vector<ImplChoice> impls_for(const GemmCase& g) {
  std::vector<ImplChoice> v;
  for (const GemmVersion& version : kGemmVersions) {
    // A library's product takes its epilogue as a kernel of its own: timed with it, and without it.
    const bool separate_epilogue = version.needs_cublas && g.epilogue();
    v.push_back({std::string(version.name) + (separate_epilogue ? "+epi" : ""), version.impl, true});
    if (separate_epilogue) v.push_back({std::string(version.name) + "-only", version.impl, false});
  }
  return v;
}

// -------------------------------------------------------------------------------------------- the runner

class Runner {
 public:
  Runner(const Options& o, int device) : opt_(o), device_(device) {
    CUDA_CHECK(cudaSetDevice(device));
    l2_ = l2_bytes(device);
    stream_.emplace();
    cublas_.emplace(stream_->get());
    timing_.repeats = o.repeats > 0 ? o.repeats : (o.quick ? 7 : 25);
    timing_.target_ms = o.quick ? 1.0 : 2.0;
    if (o.check_only) timing_ = kCheckOnlyTiming;
  }

  bool selected(const std::string& id) const {
    return opt_.filter.empty() || id.find(opt_.filter) != std::string::npos;
  }

  // With --check-only, each ceiling is launched at a small size (kCheckOnlySgemm, ...), a few times, untimed.
  void measure_ceilings() {
    const cudaStream_t s = stream_->get();
    const bool check_only = opt_.check_only;
    // Compute: a large cuBLAS SGEMM in pedantic fp32 (no TF32, no reduced-precision shortcut).
    {
      const int n = check_only ? kCheckOnlySgemm : (opt_.quick ? 4096 : 8192);
      DeviceBuffer<float> a(sz(n) * sz(n)), b(sz(n) * sz(n)), c(sz(n) * sz(n));
      fill_uniform(a.data(), a.size(), 1, -1.0f, 1.0f, s);
      fill_uniform(b.data(), b.size(), 2, -1.0f, 1.0f, s);
      CublasHandle pedantic(s);
      CUBLAS_CHECK(cublasSetMathMode(pedantic.get(), CUBLAS_PEDANTIC_MATH));
      const float one = 1.0f, zero = 0.0f;
      const TimingConfig cfg = check_only ? timing_ : TimingConfig{opt_.quick ? 3 : 7, 50.0, 1, 2};
      ceil_.sgemm_n = n;
      ceil_.sgemm = time_stream(
          [&](long) {
            CUBLAS_CHECK(cublasSgemm(pedantic.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.data(), n,
                                     b.data(), n, &zero, c.data(), n));
          },
          s, cfg);
      ceil_.sgemm_gflops = 2.0 * std::pow(static_cast<double>(n), 3) / (ceil_.sgemm.median * 1e3);
    }
    // Bandwidth: a large device-to-device copy; bytes read plus bytes written, as the rows count them.
    {
      const std::size_t bytes = check_only   ? kCheckOnlyCopyBytes
                                : opt_.quick ? (std::size_t{256} << 20)
                                             : (std::size_t{1} << 30);
      DeviceBuffer<std::uint8_t> from(bytes), to(bytes);
      CUDA_CHECK(cudaMemsetAsync(from.data(), 1, bytes, s));
      const TimingConfig cfg = check_only ? timing_ : TimingConfig{opt_.quick ? 3 : 10, 20.0, 4, 2};
      ceil_.copy_bytes = bytes;
      ceil_.copy = time_stream(
          [&](long) {
            CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), bytes, cudaMemcpyDeviceToDevice, s));
          },
          s, cfg);
      ceil_.copy_gbs = 2.0 * static_cast<double>(bytes) / (ceil_.copy.median * 1e3);
    }
    // Latency: an empty kernel, back to back on a stream, inside a graph, and as a synchronous round trip.
    {
      TimingConfig cfg = timing_;
      if (!check_only) {
        cfg.max_launches = 1000;
        cfg.target_ms = 5.0;
      }
      ceil_.empty_stream = time_stream([&](long) { launch_empty(s); }, s, cfg);
      ceil_.empty_graph = time_graph([&](long) { launch_empty(s); }, s, cfg);
      std::vector<double> us;
      const int untimed = check_only ? 0 : 200;
      for (int i = 0; i < untimed + timing_.repeats * 20; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        launch_empty(s);
        CUDA_CHECK(cudaStreamSynchronize(s));
        const auto t1 = std::chrono::steady_clock::now();
        if (i >= untimed) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      ceil_.empty_sync = summarize(std::move(us), 1);
      // The launch's own cost is spread over the barriers: a few nanoseconds of each.
      if (!check_only) {
        cfg.max_launches = 20;
        cfg.target_ms = 20.0;
      }
      const int barriers = check_only ? kCheckOnlyGridBarriers : kGridBarriers;
      try {
        ceil_.grid_barrier =
            time_stream([&](long) { ceil_.grid_barrier_blocks = launch_grid_barriers(barriers, s); }, s, cfg);
        ceil_.grid_barrier = per_operation(ceil_.grid_barrier, barriers);
      } catch (const CudaError& e) {
        // Not every setup allows a cooperative launch (an MPS client, some virtual GPUs): say so, go on.
        static_cast<void>(cudaGetLastError());
        ceil_.grid_barrier_error = e.what();
      }
    }
  }

  // Runs (or, with --list, names) one benchmark; the check first, then each timing mode it has.
  void run(const Bench& b) {
    Result r(b);
    try {
      const Check c = b.validate();
      r.error_ratio = c.ratio;
      if (!c.ok) r.check = "FAIL: " + c.detail;
    } catch (const std::exception& e) {
      r.check = std::string("ERROR: ") + e.what();
    }
    if (r.check == "ok") {
      // A check-only run launches each mode the same way, and keeps no figure of it.
      auto timed = [&](const char* mode, std::optional<Stats>& slot, const std::function<Stats()>& f) {
        try {
          const Stats st = f();
          if (!opt_.check_only) slot = st;
          r.launched.emplace_back(mode);
        } catch (const std::exception& e) {
          r.check = std::string("ERROR: ") + e.what();
        }
      };
      const cudaStream_t s = stream_->get();
      if (b.hot) timed("hot", r.hot, [&] { return time_stream(b.hot, s, timing_); });
      if (b.cold) timed("cold", r.cold, [&] { return time_stream(b.cold, s, timing_); });
      if (b.graph && b.hot) timed("graph", r.graph, [&] { return time_graph(b.hot, s, timing_); });
    }
    print_row(r);
    results_.push_back(std::move(r));
  }

  void gemm_case(const GemmCase& g) {
    std::vector<ImplChoice> chosen;
    for (const ImplChoice& c : impls_for(g))
      if (selected(g.group + "/" + g.op + "/" + c.name)) chosen.push_back(c);
    if (chosen.empty()) return;
    auto buf = std::make_shared<GemmBuffers>(g, l2_, true, max_sets());
    const cudaStream_t s = stream_->get();
    fill_uniform(buf->slab.data(), buf->slab.size(), seed_++, -1.0f, 1.0f, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    auto check = std::make_shared<GemmCheck>(g, *buf);
    const cublasHandle_t handle = cublas_->get();
    for (const ImplChoice& c : chosen) {
      Bench b(g.group, g.op, c.name, g.shape());
      b.work = g.work(c.epilogue);
      b.work.launches = c.impl == GemmImpl::cublas && c.epilogue && g.epilogue() ? 2 : 1;
      auto launch = [buf, g, c, handle, s](int set) {
        const cuda::GemmProblem p = buf->problem(g, set, c.epilogue);
        if (c.impl == GemmImpl::cublas)
          cuda::gemm_cublas(p, handle, s);
        else
          cuda::gemm(p, c.impl, s, handle);
      };
      b.validate = [buf, g, c, check, launch, s] {
        // Poison C first, so that a version that leaves elements unwritten cannot pass on an earlier result.
        CUDA_CHECK(cudaMemsetAsync(buf->slab.data() + buf->c, 0xff, g.c_count() * sizeof(float), s));
        launch(0);
        CUDA_CHECK(cudaStreamSynchronize(s));
        return (*check)(buf->slab.data() + buf->c, c.epilogue);
      };
      if (g.timed_hot) b.hot = [launch](long) { launch(0); };
      if (buf->sets > 1 || !g.timed_hot) {
        const int sets = buf->sets;
        b.cold = [launch, sets](long i) { launch(static_cast<int>(i % sets)); };
      }
      b.sets = buf->sets;
      b.graph = g.timed_graph;
      run(b);
    }
  }

  // The kernels of a step other than the products, at per-replica batch `batch`.
  void kernel_cases(int batch) {
    const std::string group = fmt::format("train-b{}", batch);
    const cudaStream_t s = stream_->get();

    // Bias gradients: column sums of dy (fc1: [batch, 256], fc2: [batch, 10]).
    for (const auto& [op, cols] : {std::pair{"fc1.db", kHid}, std::pair{"fc2.db", kOut}}) {
      const std::string id = group + "/" + op + "/column_sums";
      if (!selected(id)) continue;
      const std::size_t set_floats = align_up(sz(batch) * sz(cols)) + align_up(sz(cols));
      const int sets = rotation_sets(set_floats * 4);
      auto slab = std::make_shared<DeviceBuffer<float>>(set_floats * sz(sets));
      fill_uniform(slab->data(), slab->size(), seed_++, -1.0f, 1.0f, s);
      const std::size_t out_at = align_up(sz(batch) * sz(cols));
      auto launch = [slab, set_floats, out_at, batch, cols = cols, s](long i) {
        float* base = slab->data() + set_floats * sz(i);
        cuda::column_sums(base, base + out_at, batch, cols, s);
      };
      Bench b{group, op, "column_sums", fmt::format("{}x{} -> {}", batch, cols, cols)};
      b.work = {static_cast<double>(batch) * cols, 4.0 * (batch * cols + cols), 1};
      b.validate = [slab, out_at, batch, cols = cols, launch, s] {
        launch(0);
        CUDA_CHECK(cudaStreamSynchronize(s));
        const auto m = to_host(slab->data(), sz(batch) * sz(cols));
        const auto got = to_host(slab->data() + out_at, sz(cols));
        std::vector<float> want(sz(cols), 0.0f), abs_sum(sz(cols), 0.0f);
        for (int r = 0; r < batch; ++r)
          for (int c = 0; c < cols; ++c) {
            want[sz(c)] += m[sz(r) * sz(cols) + sz(c)];
            abs_sum[sz(c)] += std::fabs(m[sz(r) * sz(cols) + sz(c)]);
          }
        const double eps = std::numeric_limits<float>::epsilon();
        return compare(
            got.data(), want.data(), sz(cols), [&](std::size_t c) { return 2.0 * batch * eps * abs_sum[c]; },
            "db");
      };
      with_rotation(b, launch, sets);
      run(b);
    }

    // Softmax cross-entropy, forward and backward fused: logits [batch, 10] -> dlogits, loss sum.
    {
      const std::string id = group + "/softmax_xent/fused";
      if (selected(id)) {
        const std::size_t set_floats = 2 * align_up(sz(batch) * kOut) + kAlign;
        const int sets = rotation_sets(set_floats * 4);
        auto slab = std::make_shared<DeviceBuffer<float>>(set_floats * sz(sets));
        fill_uniform(slab->data(), slab->size(), seed_++, -4.0f, 4.0f, s);
        auto labels = std::make_shared<DeviceBuffer<std::uint8_t>>(sz(batch));
        std::vector<std::uint8_t> host_labels = random_labels(batch);
        to_device(labels->data(), host_labels);
        const std::size_t d_at = align_up(sz(batch) * kOut), loss_at = 2 * d_at;
        auto launch = [slab, labels, set_floats, d_at, loss_at, batch, s](long i) {
          float* base = slab->data() + set_floats * sz(i);
          cuda::softmax_xent(base, labels->data(), base + d_at, base + loss_at, batch, kOut,
                             1.0f / kGlobalBatch, s);
        };
        Bench b{group, "softmax_xent", "fused", fmt::format("{}x{}", batch, kOut)};
        // Per element: a compare for the max, a subtraction, an exp, an add, a division, a scale.
        b.work = {6.0 * batch * kOut, 4.0 * (2 * batch * kOut + 1) + batch, 1};
        b.validate = [slab, host_labels, d_at, loss_at, batch, launch, s] {
          launch(0);
          CUDA_CHECK(cudaStreamSynchronize(s));
          const auto logits = to_host(slab->data(), sz(batch) * kOut);
          const auto got = to_host(slab->data() + d_at, sz(batch) * kOut);
          const auto loss = to_host(slab->data() + loss_at, 1);
          std::vector<float> want(sz(batch) * kOut);
          const float want_loss = ref::softmax_xent(logits.data(), host_labels.data(), want.data(), batch,
                                                    kOut, 1.0f / kGlobalBatch);
          Check c = compare(
              got.data(), want.data(), want.size(), [](std::size_t) { return 1e-5 / kGlobalBatch; },
              "dlogits");
          return merge(c, compare(
                              loss.data(), &want_loss, 1,
                              [&](std::size_t) { return 1e-5 * std::fabs(want_loss) + 1e-6; }, "loss_sum"));
        };
        with_rotation(b, launch, sets);
        run(b);
      }
    }

    // Accuracy: argmax per row, marked 1 where it equals the label (Thrust's transform; the count over the
    // whole test set is one reduction at the end of an evaluation).
    {
      const std::string id = group + "/mark_correct/argmax";
      if (selected(id)) {
        const std::size_t set_floats = align_up(sz(batch) * kOut) + kAlign;
        const int sets = rotation_sets(set_floats * 4);
        auto slab = std::make_shared<DeviceBuffer<float>>(set_floats * sz(sets));
        fill_uniform(slab->data(), slab->size(), seed_++, -4.0f, 4.0f, s);
        auto labels = std::make_shared<DeviceBuffer<std::uint8_t>>(sz(batch));
        auto marks = std::make_shared<DeviceBuffer<std::uint8_t>>(sz(batch) * sz(sets));
        auto scratch = std::make_shared<ThrustScratch>();
        std::vector<std::uint8_t> host_labels = random_labels(batch);
        to_device(labels->data(), host_labels);
        auto launch = [slab, labels, marks, scratch, set_floats, batch, s](long i) {
          cuda::mark_correct(slab->data() + set_floats * sz(i), labels->data(),
                             marks->data() + sz(batch) * sz(i), batch, kOut, *scratch, s);
        };
        Bench b{group, "mark_correct", "argmax", fmt::format("{}x{}", batch, kOut)};
        b.work = {1.0 * batch * kOut, 4.0 * batch * kOut + 2.0 * batch, 1};
        b.validate = [slab, marks, host_labels, batch, launch, s] {
          launch(0);
          CUDA_CHECK(cudaStreamSynchronize(s));
          const auto logits = to_host(slab->data(), sz(batch) * kOut);
          const auto row_marks = to_host(marks->data(), sz(batch));
          const float got = static_cast<float>(std::count(row_marks.begin(), row_marks.end(), 1));
          const float want =
              static_cast<float>(ref::count_correct(logits.data(), host_labels.data(), batch, kOut));
          return compare(
              &got, &want, 1, [](std::size_t) { return 0.0; }, "correct");
        };
        with_rotation(b, launch, sets);
        run(b);
      }
    }

    // The batch: gather rows of the uint8 training set by index and normalise them.
    {
      const std::string id = group + "/gather/normalize";
      if (selected(id)) {
        auto data = training_set();
        const int steps = kTrainImages / batch;
        auto launch = [data, batch, steps, s](long i) {
          cuda::gather_normalize(data->images.data(), data->labels.data(),
                                 data->order.data() + sz(i % steps) * sz(batch), data->x.data(),
                                 data->y.data(), batch, kIn, s);
        };
        Bench b{group, "gather", "normalize", fmt::format("{} of {} rows x {} u8", batch, kTrainImages, kIn)};
        b.work = {3.0 * batch * kIn, 5.0 * batch * kIn + 4.0 * batch + 2.0 * batch, 1};
        b.validate = [data, batch, launch, s] {
          launch(0);
          CUDA_CHECK(cudaStreamSynchronize(s));
          const auto x = to_host(data->x.data(), sz(batch) * kIn);
          const auto y = to_host(data->y.data(), sz(batch));
          std::vector<float> want_x(sz(batch) * kIn);
          std::vector<std::uint8_t> want_y(sz(batch));
          ref::gather_normalize(data->host_images.data(), data->host_labels.data(), data->host_order.data(),
                                want_x.data(), want_y.data(), batch, kIn);
          Check c = compare(
              x.data(), want_x.data(), x.size(), [](std::size_t) { return 0.0; }, "x");
          const std::vector<float> yf(y.begin(), y.end()), want_yf(want_y.begin(), want_y.end());
          return merge(c, compare(
                              yf.data(), want_yf.data(), yf.size(), [](std::size_t) { return 0.0; }, "y"));
        };
        // Each launch gathers the next batch of the epoch's order: the rows differ launch to launch, as in
        // training, so there is no separate cold mode.
        b.hot = launch;
        b.graph = true;
        run(b);
      }
    }
  }

  // The SGD step over the flat parameter buffer (independent of the batch).
  void sgd_cases() {
    const cudaStream_t s = stream_->get();
    for (const bool momentum : {false, true}) {
      const std::string impl = momentum ? "momentum0.9" : "plain";
      const std::string id = "kernel/sgd/" + impl;
      if (!selected(id)) continue;
      constexpr std::size_t n = ParamLayout::kCount;
      const std::size_t set_floats = 3 * align_up(n);  // params, grads, momentum
      const int sets = rotation_sets(set_floats * 4);
      auto slab = std::make_shared<DeviceBuffer<float>>(set_floats * sz(sets));
      fill_uniform(slab->data(), slab->size(), seed_++, -0.05f, 0.05f, s);
      SgdConfig cfg;
      cfg.momentum = momentum ? 0.9f : 0.0f;
      const std::size_t g_at = align_up(n), m_at = 2 * align_up(n);
      auto launch = [slab, set_floats, g_at, m_at, cfg, momentum, s](long i) {
        float* base = slab->data() + set_floats * sz(i);
        cuda::sgd_step(base, base + g_at, momentum ? base + m_at : nullptr, n, cfg, false, s);
      };
      Bench b{"kernel", "sgd", impl, fmt::format("{} params", n)};
      b.work = momentum ? Work{4.0 * static_cast<double>(n), 20.0 * static_cast<double>(n), 1}
                        : Work{2.0 * static_cast<double>(n), 12.0 * static_cast<double>(n), 1};
      b.validate = [slab, g_at, m_at, cfg, momentum, launch, s] {
        auto p = to_host(slab->data(), n);
        const auto g = to_host(slab->data() + g_at, n);
        auto m = to_host(slab->data() + m_at, n);
        launch(0);
        CUDA_CHECK(cudaStreamSynchronize(s));
        ref::sgd_step(p.data(), g.data(), momentum ? m.data() : nullptr, n, cfg, false);
        const auto got = to_host(slab->data(), n);
        // The kernel avoids contracting into multiply-adds, as the reference does: equal to the bit.
        Check c = compare(
            got.data(), p.data(), n, [](std::size_t) { return 0.0; }, "params");
        if (momentum) {
          const auto got_m = to_host(slab->data() + m_at, n);
          c = merge(c, compare(
                           got_m.data(), m.data(), n, [](std::size_t) { return 0.0; }, "momentum"));
        }
        return c;
      };
      with_rotation(b, launch, sets);
      run(b);
    }
  }

  // A whole training step of one replica with `batch` rows (of a global batch of 64), built from the
  // project's launchers as CudaReplica does: gather, fc1 and fc2 forward, softmax cross-entropy, fc2 and fc1
  // backward, SGD; with the fused head (impl name "+head"), fc1 forward, the head, fc1's weight gradient;
  // the fused step ("fused-step"), its three kernels, also with programmatic dependent launch
  // ("fused-step+pdl"), and as the persistent kernel ("persistent", one step a launch). No all-reduce
  // (allreduce_bench times that).
  void step_cases(int batch) {
    const std::string group = fmt::format("step-b{}", batch);
    const cudaStream_t s = stream_->get();
    for (const StepVariant& variant : kStepVariants) {
      const GemmImpl impl = variant.impl;
      const bool fused_head = variant.fused_head;
      const bool fused_step = variant.fused_step;
      const cuda::LaunchOrder order =
          variant.programmatic ? cuda::LaunchOrder::programmatic : cuda::LaunchOrder::serial;
      const std::string name = variant.name();
      const std::string id = group + "/step/" + name;
      if (!selected(id)) continue;
      if (variant.programmatic && !supports_programmatic_launch(device_)) {
        fmt::print("{}: skipped, the device is older than compute capability 9.0\n", id);
        continue;
      }
      if (variant.persistent && !supports_persistent_step(device_)) {
        fmt::print("{}: skipped, the device takes no cooperative launch here\n", id);
        continue;
      }
      const bool persistent = variant.persistent;
      auto data = training_set();
      struct StepBuffers {
        DeviceBuffer<float> params{ParamLayout::kCount}, grads{ParamLayout::kGradCount};
        DeviceBuffer<float> x, h, dh, logits, dlogits;
        DeviceBuffer<std::uint8_t> y;
        DeviceBuffer<int> first{1};  // the fused step's row offset: 0, the rows launch(0) takes, every time
      };
      auto buf = std::make_shared<StepBuffers>();
      buf->x = DeviceBuffer<float>(sz(batch) * kIn);
      buf->h = DeviceBuffer<float>(sz(batch) * kHid);
      buf->dh = DeviceBuffer<float>(sz(batch) * kHid);
      buf->logits = DeviceBuffer<float>(sz(batch) * kOut);
      buf->dlogits = DeviceBuffer<float>(sz(batch) * kOut);
      buf->y = DeviceBuffer<std::uint8_t>(sz(batch));
      CUDA_CHECK(cudaMemsetAsync(buf->first.data(), 0, sizeof(int), s));
      // nn.Linear's initialisation ranges: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
      const auto v = ParamViews<float>::of(buf->params.data());
      const float r1 = 1.0f / std::sqrt(static_cast<float>(kIn)),
                  r2 = 1.0f / std::sqrt(static_cast<float>(kHid));
      fill_uniform(v.fc1_weight, sz(kHid) * kIn, seed_++, -r1, r1, s);
      fill_uniform(v.fc1_bias, kHid, seed_++, -r1, r1, s);
      fill_uniform(v.fc2_weight, sz(kOut) * kHid, seed_++, -r2, r2, s);
      fill_uniform(v.fc2_bias, kOut, seed_++, -r2, r2, s);
      const cuda::GemmContext ctx{impl, s, cublas_->get()};
      const int steps = kTrainImages / batch;
      SgdConfig sgd;   // lr 0.01, no momentum: the reference program
      StepView fused;  // the fused kernels' view of these buffers
      fused.images = data->images.data();
      fused.labels = data->labels.data();
      fused.order = data->order.data();
      fused.cursor = buf->first.data();
      fused.params = buf->params.data();
      fused.grads = buf->grads.data();
      fused.x = buf->x.data();
      fused.y = buf->y.data();
      fused.h = buf->h.data();
      fused.dh = buf->dh.data();
      fused.logits = buf->logits.data();
      fused.dlogits = buf->dlogits.data();
      int blocks = 0;  // the persistent kernel's grid: one block an SM
      CUDA_CHECK(cudaDeviceGetAttribute(&blocks, cudaDevAttrMultiProcessorCount, device_));
      auto launch = [data, buf, batch, steps, ctx, sgd, s, fused, fused_head = fused_head,
                     fused_step = fused_step, order, persistent, blocks](long i) {
        const auto w = ParamViews<float>::of(buf->params.data());
        const auto g = ParamViews<float>::of(buf->grads.data());
        if (persistent) {  // one step a launch, on the rows of step 0
          enqueue_persistent_steps(fused, batch, kGlobalBatch, sgd, /*first=*/0, /*steps=*/1, blocks, s);
          return;
        }
        if (fused_step) {
          // The rows of step 0 every time (the offset is not moved on): the time does not depend on them.
          enqueue_fused_step(fused, batch, kGlobalBatch, sgd, /*advance_cursor=*/false, order, s);
          return;
        }
        cuda::gather_normalize(data->images.data(), data->labels.data(),
                               data->order.data() + sz(i % steps) * sz(batch), buf->x.data(), buf->y.data(),
                               batch, kIn, s);
        cuda::linear_forward(buf->x.data(), w.fc1_weight, w.fc1_bias, buf->h.data(), {batch, kIn, kHid}, true,
                             ctx);
        if (fused_head) {
          enqueue_classifier_head(fused, batch, 1.0f / kGlobalBatch, s);
          cuda::linear_backward(buf->dh.data(), buf->x.data(), w.fc1_weight, g.fc1_weight, nullptr, nullptr,
                                {batch, kIn, kHid}, false, ctx);
          cuda::sgd_step(buf->params.data(), buf->grads.data(), nullptr, ParamLayout::kCount, sgd, false, s);
          return;
        }
        cuda::linear_forward(buf->h.data(), w.fc2_weight, w.fc2_bias, buf->logits.data(), {batch, kHid, kOut},
                             false, ctx);
        cuda::softmax_xent(buf->logits.data(), buf->y.data(), buf->dlogits.data(),
                           buf->grads.data() + ParamLayout::kLossSlot, batch, kOut, 1.0f / kGlobalBatch, s);
        cuda::linear_backward(buf->dlogits.data(), buf->h.data(), w.fc2_weight, g.fc2_weight, g.fc2_bias,
                              buf->dh.data(), {batch, kHid, kOut}, true, ctx);
        cuda::linear_backward(buf->dh.data(), buf->x.data(), w.fc1_weight, g.fc1_weight, g.fc1_bias, nullptr,
                              {batch, kIn, kHid}, false, ctx);
        cuda::sgd_step(buf->params.data(), buf->grads.data(), nullptr, ParamLayout::kCount, sgd, false, s);
      };
      Bench b{group, "step", name, fmt::format("{} rows of {}", batch, kGlobalBatch)};
      b.work = step_work(batch, impl);
      if (fused_head) b.work.launches -= 5;  // the head's one launch for six
      if (fused_step) b.work.launches = persistent ? 1 : 3;
      b.validate = [data, buf, batch, sgd, launch, s] {
        return check_step(*data, *buf, batch, sgd, launch, s);
      };
      b.hot = launch;
      // Not the persistent kernel: a cooperative launch inside a stream capture is not taken everywhere,
      // and its many-steps-a-launch time is the epoch benchmark's "persistent+64".
      b.graph = !persistent;
      run(b);
      if (persistent && results_.back().check == "ok") persistent_phases(fused, batch, sgd, blocks);
    }
  }

  void print_ceilings() const {
    if (opt_.check_only) {
      fmt::print(
          "Ceilings: launched untimed at small sizes (cublasSgemm {0}x{0}x{0}, a copy of {1} KiB, an empty "
          "kernel, {2} grid-wide barriers){3}.\n\n",
          ceil_.sgemm_n, ceil_.copy_bytes >> 10, kCheckOnlyGridBarriers,
          ceil_.grid_barrier_error.empty() ? ""
                                           : "; the barrier's launch failed: " + ceil_.grid_barrier_error);
      return;
    }
    fmt::print("Ceilings, measured in this run:\n");
    fmt::print(
        "  compute    cublasSgemm {0}x{0}x{0}, fp32 pedantic (no TF32): {1:.1f} GFLOP/s ({2:.2f} ms)\n",
        ceil_.sgemm_n, ceil_.sgemm_gflops, ceil_.sgemm.median / 1e3);
    fmt::print("  bandwidth  cudaMemcpy device to device, {} MiB: {:.1f} GB/s read + write ({:.3f} ms)\n",
               ceil_.copy_bytes >> 20, ceil_.copy_gbs, ceil_.copy.median / 1e3);
    fmt::print(
        "  latency    empty kernel: {:.2f} us per launch on a stream, {:.2f} us per node in a graph, "
        "{:.2f} us launch + synchronize\n",
        ceil_.empty_stream.median, ceil_.empty_graph.median, ceil_.empty_sync.median);
    if (ceil_.grid_barrier_error.empty()) {
      fmt::print(
          "  barrier    grid-wide, {} blocks of 256 (one per SM), in one cooperative launch: {:.3f} us\n\n",
          ceil_.grid_barrier_blocks, ceil_.grid_barrier.median);
    } else {
      fmt::print("  barrier    not measured: {}\n\n", ceil_.grid_barrier_error);
    }
  }

  void print_header() const {
    if (opt_.check_only) {
      fmt::print("{:<34} {:<24} {:<12} {:<18}  {}\n", "benchmark", "shape", "impl", "launched, untimed",
                 "check");
      return;
    }
    fmt::print("{:<34} {:<24} {:<12} {:>22} {:>9} {:>9} {:>9} {:>8} {:>6} {:>6} {:>6}  {}\n", "benchmark",
               "shape", "impl", "hot us (p10-p90)", "cold us", "graph us", "GFLOP/s", "GB/s", "%peak", "%bw",
               "xlaunch", "check");
  }

  // With --check-only: "check_only": true, every row without a time (the modes launched instead), and no
  // ceilings or persistent phases.
  nlohmann::json json(const Options& o) const {
    nlohmann::json rows = nlohmann::json::array();
    for (const Result& r : results_) {
      nlohmann::json j{{"id", r.group + "/" + r.op + "/" + r.impl},
                       {"group", r.group},
                       {"op", r.op},
                       {"impl", r.impl},
                       {"shape", r.shape},
                       {"flops", r.work.flops},
                       {"bytes", r.work.bytes},
                       {"launches", r.work.launches},
                       {"check", r.check},
                       {"error_over_tolerance", r.error_ratio}};
      auto mode = [&](const char* name, const std::optional<Stats>& st, double floor_us) {
        if (!st) return;
        nlohmann::json m = to_json(*st);
        m["gflops"] = r.work.flops / (st->median * 1e3);
        m["gbs"] = r.work.bytes / (st->median * 1e3);
        m["fraction_of_peak_flops"] = m["gflops"].get<double>() / ceil_.sgemm_gflops;
        m["fraction_of_copy_bandwidth"] = m["gbs"].get<double>() / ceil_.copy_gbs;
        m["times_launch_floor"] = st->median / (r.work.launches * floor_us);
        if (std::string(name) == "cold") m["buffer_sets"] = r.cold_sets;
        j[name] = m;
      };
      mode("hot", r.hot, ceil_.empty_stream.median);
      mode("cold", r.cold, ceil_.empty_stream.median);
      mode("graph", r.graph, ceil_.empty_graph.median);
      if (o.check_only) j["launched"] = r.launched;
      rows.push_back(j);
    }
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    if (o.check_only)
      return {{"program", kProgram},
              {"check_only", true},
              {"emulated", devices_emulated()},
              {"date", utc_now()},
              {"host", host},
              {"device", device_json(device_)},
              {"options", {{"quick", o.quick}, {"filter", o.filter}}},
              {"method",
               "check only: every row checked against the CPU reference, then each of its modes launched as "
               "few times as the timing allows; nothing timed"},
              {"rows", rows}};
    return {
        {"program", kProgram},
        {"check_only", false},
        {"date", utc_now()},
        {"host", host},
        {"load_average_1min", load_average()},
        {"device", device_json(device_)},
        {"options", {{"quick", o.quick}, {"filter", o.filter}, {"repeats", timing_.repeats}}},
        {"method",
         "median over repeats of (CUDA event time of N back-to-back launches) / N; hot: one buffer set; "
         "cold: buffer sets rotated, more than twice the L2 in all; graph: the N launches captured in one "
         "CUDA graph. Rates from the hot time, or the cold one when there is no hot."},
        {"ceilings",
         {{"sgemm",
           {{"n", ceil_.sgemm_n},
            {"math", "CUBLAS_PEDANTIC_MATH"},
            {"gflops", ceil_.sgemm_gflops},
            {"timing", to_json(ceil_.sgemm)}}},
          {"copy",
           {{"bytes", ceil_.copy_bytes},
            {"gbs_read_plus_write", ceil_.copy_gbs},
            {"timing", to_json(ceil_.copy)}}},
          {"empty_kernel",
           {{"stream", to_json(ceil_.empty_stream)},
            {"graph", to_json(ceil_.empty_graph)},
            {"launch_and_sync_host_clock", to_json(ceil_.empty_sync)}}},
          {"grid_barrier",
           {{"blocks", ceil_.grid_barrier_blocks},
            {"threads_per_block", 256},
            {"barriers_per_launch", kGridBarriers},
            {"per_barrier", ceil_.grid_barrier_error.empty() ? to_json(ceil_.grid_barrier)
                                                             : nlohmann::json(ceil_.grid_barrier_error)}}}}},
        {"persistent_phases", persistent_phases_},
        {"rows", rows}};
  }

  bool all_ok() const {
    return std::all_of(results_.begin(), results_.end(), [](const Result& r) { return r.check == "ok"; });
  }
  std::size_t count() const { return results_.size(); }

 private:
  // How many buffer sets of `set_bytes` make a working set of twice the L2 (1 when one set already is).
  int rotation_sets(std::size_t set_bytes) const {
    if (set_bytes >= 2 * l2_) return 1;
    const std::size_t want = (2 * l2_ + set_bytes - 1) / set_bytes;
    const int sets = static_cast<int>(std::clamp<std::size_t>(want, 1, (std::size_t{1} << 30) / set_bytes));
    return std::min(sets, max_sets());
  }

  // The most buffer sets a cold mode rotates over. A check-only run times nothing, so the L2 need not be
  // defeated: two sets take the rotation's path, and spare an emulated device filling twice the L2 each case.
  int max_sets() const { return opt_.check_only ? 2 : std::numeric_limits<int>::max(); }

  static void with_rotation(Bench& b, const LaunchFn& launch, int sets) {
    b.hot = [launch](long) { launch(0); };
    if (sets > 1) b.cold = [launch, sets](long i) { launch(i % sets); };
    b.sets = sets;
    b.graph = true;
  }

  std::vector<std::uint8_t> random_labels(int n) {
    std::mt19937 rng(seed_++);
    std::vector<std::uint8_t> labels(sz(n));
    for (auto& l : labels)
      l = static_cast<std::uint8_t>(rng() % kOut);
    return labels;
  }

  // A training set of random pixels and labels (MNIST's size), on the device and on the host, with one
  // epoch's order; made once and shared.
  struct TrainingSet {
    std::vector<std::uint8_t> host_images, host_labels;
    std::vector<std::int32_t> host_order;
    DeviceBuffer<std::uint8_t> images, labels;
    DeviceBuffer<std::int32_t> order;
    DeviceBuffer<float> x{sz(kGlobalBatch) * kIn};
    DeviceBuffer<std::uint8_t> y{kGlobalBatch};
  };
  std::shared_ptr<TrainingSet> training_set() {
    if (training_set_) return training_set_;
    auto t = std::make_shared<TrainingSet>();
    std::mt19937 rng(12345);
    t->host_images.resize(sz(kTrainImages) * kIn);
    for (auto& p : t->host_images)
      p = static_cast<std::uint8_t>(rng() >> 24);
    t->host_labels = random_labels(kTrainImages);
    t->host_order.resize(kTrainImages);
    std::iota(t->host_order.begin(), t->host_order.end(), 0);
    std::shuffle(t->host_order.begin(), t->host_order.end(), rng);
    t->images = DeviceBuffer<std::uint8_t>(t->host_images.size());
    t->labels = DeviceBuffer<std::uint8_t>(t->host_labels.size());
    t->order = DeviceBuffer<std::int32_t>(t->host_order.size());
    to_device(t->images.data(), t->host_images);
    to_device(t->labels.data(), t->host_labels);
    to_device(t->order.data(), t->host_order);
    training_set_ = t;
    return t;
  }

  static Work step_work(int batch, GemmImpl impl) {
    auto gemm = [](double m, double n, double k, double extra_floats) {
      return Work{2.0 * m * n * k, 4.0 * (m * k + k * n + m * n + extra_floats), 1};
    };
    const double b = batch;
    Work w{3.0 * b * kIn, 5.0 * b * kIn + 6.0 * b, 1};                    // gather
    w += gemm(b, kHid, kIn, kHid);                                        // fc1 forward, + bias
    w += gemm(b, kOut, kHid, kOut);                                       // fc2 forward, + bias
    w += Work{6.0 * b * kOut, 4.0 * (2 * b * kOut + 1) + b, 1};           // softmax cross-entropy
    w += gemm(kOut, kHid, b, 0);                                          // fc2 dW
    w += Work{b * kOut, 4.0 * (b * kOut + kOut), 1};                      // fc2 db
    w += gemm(b, kHid, kOut, b * kHid);                                   // fc2 dX, with the mask
    w += gemm(kHid, kIn, b, 0);                                           // fc1 dW
    w += Work{b * kHid, 4.0 * (b * kHid + kHid), 1};                      // fc1 db
    w += Work{2.0 * ParamLayout::kCount, 12.0 * ParamLayout::kCount, 1};  // SGD
    if (impl == GemmImpl::cublas) w.launches += 3;  // the separate epilogues of fc1 fwd, fc2 fwd and fc2 dX
    return w;
  }

  template <typename Data, typename Buffers>
  static Check check_step(const Data& data, Buffers& buf, int batch, const SgdConfig& sgd,
                          const LaunchFn& launch, cudaStream_t s) {
    std::vector<float> params = to_host(buf.params.data(), ParamLayout::kCount);
    launch(0);
    CUDA_CHECK(cudaStreamSynchronize(s));
    const auto got_params = to_host(buf.params.data(), ParamLayout::kCount);
    const auto got_grads = to_host(buf.grads.data(), ParamLayout::kGradCount);
    // The same step with the reference ops.
    std::vector<float> x(sz(batch) * kIn), h(sz(batch) * kHid), dh(sz(batch) * kHid),
        logits(sz(batch) * kOut), dlogits(sz(batch) * kOut), grads(ParamLayout::kGradCount);
    std::vector<std::uint8_t> y(sz(batch));
    const auto w = ParamViews<const float>::of(params.data());
    const auto g = ParamViews<float>::of(grads.data());
    ref::gather_normalize(data.host_images.data(), data.host_labels.data(), data.host_order.data(), x.data(),
                          y.data(), batch, kIn);
    ref::linear_forward(x.data(), w.fc1_weight, w.fc1_bias, h.data(), {batch, kIn, kHid}, true);
    ref::linear_forward(h.data(), w.fc2_weight, w.fc2_bias, logits.data(), {batch, kHid, kOut}, false);
    grads[ParamLayout::kLossSlot] =
        ref::softmax_xent(logits.data(), y.data(), dlogits.data(), batch, kOut, 1.0f / kGlobalBatch);
    ref::linear_backward(dlogits.data(), h.data(), w.fc2_weight, g.fc2_weight, g.fc2_bias, dh.data(),
                         {batch, kHid, kOut}, true);
    ref::linear_backward(dh.data(), x.data(), w.fc1_weight, g.fc1_weight, g.fc1_bias, nullptr,
                         {batch, kIn, kHid}, false);
    ref::sgd_step(params.data(), grads.data(), nullptr, ParamLayout::kCount, sgd, false);
    // Gradients: float sums of up to 256 terms in another order; within 1e-4 of the largest of the buffer
    // (a wrong element is off by its whole size). Parameters then differ by lr times that at most.
    float gmax = 0.0f;
    for (std::size_t i = 0; i < ParamLayout::kCount; ++i)
      gmax = std::max(gmax, std::fabs(grads[i]));
    Check c = compare(
        got_grads.data(), grads.data(), ParamLayout::kGradCount,
        [&](std::size_t i) {
          return i == ParamLayout::kLossSlot ? 1e-5 * std::fabs(grads[i]) + 1e-6 : 1e-4 * gmax + 1e-9;
        },
        "grads");
    return merge(c, compare(
                        got_params.data(), params.data(), ParamLayout::kCount,
                        [&](std::size_t) { return sgd.lr * (1e-4 * gmax) + 1e-7; }, "params"));
  }

  void print_row(const Result& r) {
    if (r.group != last_group_) {
      fmt::print("\n");
      last_group_ = r.group;
    }
    if (opt_.check_only) {
      // The modes launched in place of their times; "checked" where a timed run would say "ok".
      const std::string launched = r.launched.empty() ? "-" : fmt::format("{}", fmt::join(r.launched, ", "));
      fmt::print("{:<34} {:<24} {:<12} {:<18}  {}\n", r.group + "/" + r.op, r.shape, r.impl, launched,
                 r.check == "ok" ? "checked" : r.check);
      std::fflush(stdout);
      return;
    }
    const std::optional<Stats>& rate = r.hot ? r.hot : r.cold;
    auto us = [](const std::optional<Stats>& st) { return st ? fmt::format("{:.2f}", st->median) : "-"; };
    std::string hot = "-";
    if (r.hot) hot = fmt::format("{:.2f} ({:.2f}-{:.2f})", r.hot->median, r.hot->p10, r.hot->p90);
    std::string gflops = "-", gbs = "-", peak = "-", bw = "-", floor = "-";
    if (rate) {
      const double gf = r.work.flops / (rate->median * 1e3), gb = r.work.bytes / (rate->median * 1e3);
      gflops = fmt::format("{:.1f}", gf);
      gbs = fmt::format("{:.1f}", gb);
      peak = fmt::format("{:.1f}", 100.0 * gf / ceil_.sgemm_gflops);
      bw = fmt::format("{:.1f}", 100.0 * gb / ceil_.copy_gbs);
      floor = fmt::format("{:.1f}", rate->median / (r.work.launches * ceil_.empty_stream.median));
    }
    std::string check = r.check;
    if (check.size() > 90) check = check.substr(0, 87) + "...";
    fmt::print("{:<34} {:<24} {:<12} {:>22} {:>9} {:>9} {:>9} {:>8} {:>6} {:>6} {:>6}  {}\n",
               r.group + "/" + r.op, r.shape, r.impl, hot, us(r.cold), us(r.graph), gflops, gbs, peak, bw,
               floor, check);
    std::fflush(stdout);
  }

  Options opt_;
  int device_;
  std::size_t l2_ = 0;
  std::optional<Stream> stream_;
  std::optional<CublasHandle> cublas_;
  TimingConfig timing_;
  // The persistent kernel with kPhaseSteps steps a launch, on the rows of steps 0 to 63 every time: its
  // device time per step (time_stream, as every row is timed), and how a step divides among its three phases
  // (the phase timer of cuda::PersistentStepArgs in one more launch: block 0's SM clock, each phase with the
  // barrier after it), those shares applied to the step's median time.
  void persistent_phases(const StepView& view, int batch, const SgdConfig& sgd, int blocks) {
    constexpr int kPhaseSteps = 64;
    const cudaStream_t s = stream_->get();
    auto launch = [&](long long* timer) {
      enqueue_persistent_steps(view, batch, kGlobalBatch, sgd, /*first=*/0, kPhaseSteps, blocks, s, timer);
    };
    if (opt_.check_only) {
      // One launch, with the phase timer (the longer path): no figure to report, and each launch of 64
      // steps costs an emulated device seconds.
      DeviceBuffer<long long> cycles(3);
      CUDA_CHECK(cudaMemsetAsync(cycles.data(), 0, cycles.bytes(), s));
      launch(cycles.data());
      CUDA_CHECK(cudaStreamSynchronize(s));
      fmt::print("  persistent, {} steps a launch, with the phase timer: launched once, untimed\n",
                 kPhaseSteps);
      return;
    }
    const Stats per_step =
        per_operation(time_stream([&](long) { launch(nullptr); }, s, timing_), kPhaseSteps);
    DeviceBuffer<long long> cycles(3);
    CUDA_CHECK(cudaMemsetAsync(cycles.data(), 0, cycles.bytes(), s));
    launch(cycles.data());
    std::array<long long, 3> c{};
    CUDA_CHECK(cudaMemcpyAsync(c.data(), cycles.data(), cycles.bytes(), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    const double total = static_cast<double>(c[0] + c[1] + c[2]);
    constexpr const char* kPhases[] = {"gather + fc1 forward", "classifier head",
                                       "fc1 weight gradient + SGD"};
    std::string shares;
    nlohmann::json phases = nlohmann::json::array();
    for (int p = 0; p < 3; ++p) {
      const double share = total > 0 ? static_cast<double>(c[static_cast<std::size_t>(p)]) / total : 0.0;
      shares += fmt::format("{}{} {:.0f}% ({:.2f} us)", p ? ", " : "", kPhases[p], 100.0 * share,
                            share * per_step.median);
      phases.push_back(
          {{"phase", kPhases[p]},
           {"cycles_per_step", static_cast<double>(c[static_cast<std::size_t>(p)]) / kPhaseSteps},
           {"share", share},
           {"us_per_step", share * per_step.median}});
    }
    fmt::print(
        "  persistent, {} steps a launch: {:.2f} us a step on the device (p10 {:.2f}, p90 {:.2f}); "
        "each phase with its barrier: {}\n",
        kPhaseSteps, per_step.median, per_step.p10, per_step.p90, shares);
    persistent_phases_.push_back({{"steps_per_launch", kPhaseSteps},
                                  {"blocks", blocks},
                                  {"rows", batch},
                                  {"step", to_json(per_step)},
                                  {"phases", phases}});
  }

  Ceilings ceil_;
  nlohmann::json persistent_phases_ = nlohmann::json::array();  // one entry a persistent_phases run
  std::vector<Result> results_;
  std::shared_ptr<TrainingSet> training_set_;
  std::uint32_t seed_ = 100;
  std::string last_group_;
};

// The GEMM cases of one per-replica batch: the products a step runs.
std::vector<GemmCase> training_gemms(int batch) {
  const std::string group = fmt::format("train-b{}", batch);
  return {
      {group, "fc1.fwd", Orient::fwd, batch, kHid, kIn, true, true, false, true, true},
      {group, "fc2.fwd", Orient::fwd, batch, kOut, kHid, true, false, false, true, true},
      {group, "fc2.dW", Orient::dw, kOut, kHid, batch, false, false, false, true, true},
      {group, "fc2.dX", Orient::dx, batch, kHid, kOut, false, false, true, true, true},
      {group, "fc1.dW", Orient::dw, kHid, kIn, batch, false, false, false, true, true},
  };
}

// Larger problems, where the versions' differences in data reuse show: square ones in the three orientations,
// and fc1 at large batches (what data parallelism pays for).
std::vector<GemmCase> sweep_gemms(bool quick) {
  std::vector<GemmCase> cases;
  const std::vector<int> squares =
      quick ? std::vector<int>{512, 2048} : std::vector<int>{256, 512, 1024, 2048, 4096};
  for (const int s : squares) {
    cases.push_back(
        {"sweep", fmt::format("fwd-{}", s), Orient::fwd, s, s, s, true, true, false, false, false});
    cases.push_back(
        {"sweep", fmt::format("dW-{}", s), Orient::dw, s, s, s, false, false, false, false, false});
    cases.push_back(
        {"sweep", fmt::format("dX-{}", s), Orient::dx, s, s, s, false, false, true, false, false});
  }
  const std::vector<int> batches = quick ? std::vector<int>{4096} : std::vector<int>{1024, 16384};
  for (const int b : batches) {
    cases.push_back(
        {"sweep", fmt::format("fc1.fwd-b{}", b), Orient::fwd, b, kHid, kIn, true, true, false, false, false});
    cases.push_back(
        {"sweep", fmt::format("fc1.dW-b{}", b), Orient::dw, kHid, kIn, b, false, false, false, false, false});
  }
  return cases;
}

constexpr int kTrainBatches[] = {64, 32, 22, 8};  // one replica's rows of 64 over 1, 2, 3 and 8 GPUs

void run_all(Runner& runner, const Options& o) {
  for (const int batch : kTrainBatches) {
    for (const GemmCase& g : training_gemms(batch))
      runner.gemm_case(g);
    runner.kernel_cases(batch);
  }
  runner.sgd_cases();
  for (const int batch : kTrainBatches)
    runner.step_cases(batch);
  for (const GemmCase& g : sweep_gemms(o.quick))
    runner.gemm_case(g);
}

int run(int argc, char** argv) {
  Options o;
  CLI::App app{
      "mnist-dp-bench: every CUDA kernel and GEMM version of mnist-dp, at the training shapes and larger, "
      "beside "
      "cuBLAS and against ceilings measured in the same run. Each is checked against the CPU reference "
      "first."};
  app.add_flag("--quick", o.quick, "Fewer repeats and sweep sizes (about a quarter of the time)");
  app.add_option("--filter", o.filter, "Only benchmarks whose id (group/op/impl, see --list) contains this");
  app.add_option("--json", o.json_path,
                 "Also write every row, the ceilings and the machine to this JSON file");
  app.add_option("--device", o.device, "CUDA device index")->check(CLI::NonNegativeNumber);
  app.add_option("--repeats", o.repeats, "Timings per mode (default 25, 7 with --quick)")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--list", o.list, "List the benchmark ids (no GPU needed) and exit");
  app.add_flag("--epoch", o.epoch,
               "Time whole training epochs instead, launched the plain way and replayed as CUDA graphs");
  app.add_option("--epoch-gemm", o.epoch_gemm, "With --epoch: the matrix product (" + gemm_names_text() + ")")
      ->check(CLI::IsMember(gemm_names()))
      ->capture_default_str();
  bool epoch_tf32 = false;
  app.add_flag("--epoch-tf32", epoch_tf32, "With --epoch --epoch-gemm cublas: cuBLAS's products in TF32");
  std::string epoch_variants;
  app.add_option("--epoch-variants", epoch_variants,
                 fmt::format("With --epoch: the variants to time, comma-separated, of {} (default: all)",
                             fmt::join(kEpochVariants, ", ")))
      ->check([](const std::string& list) {
        for (const std::string& name : split_commas(list))
          if (std::find_if(std::begin(kEpochVariants), std::end(kEpochVariants),
                           [&](const char* v) { return name == v; }) == std::end(kEpochVariants))
            return fmt::format("'{}' is not a variant ({})", name, fmt::join(kEpochVariants, ", "));
        return std::string();
      });
  app.add_option("--rounds", o.rounds, "With --epoch: rounds, each variant once per round")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--epoch-steps", o.epoch_steps,
                 "With --epoch: at most N steps an epoch (a training set of N x 64 random rows; default: "
                 "60,000 rows, 938 steps)")
      ->check(CLI::Range(1, 1000000));
  app.add_flag(
      "--check-only", o.check_only,
      "Time nothing: set up every selected benchmark, check it as a timed run does (a failed check "
      "still exits 1), launch each mode as few times as the timing allows, and print no time (the "
      "JSON says \"check_only\": true and has no times). A rehearsal of a GPU run: runs on emulated "
      "devices too. --repeats and --rounds are ignored (--epoch: one round, one epoch in place of the "
      "timed ones; --epoch-steps keeps it short)");
  CLI11_PARSE(app, argc, argv);
  if (o.epoch_steps > 0 && !o.epoch)
    throw std::invalid_argument("--epoch-steps: only with --epoch (the kernel rows have no epochs)");

  if (o.epoch) {
    EpochBenchOptions e;
    e.device = o.device;
    if (o.repeats > 0) e.repeats = o.repeats;
    e.rounds = o.rounds;
    e.max_steps = o.epoch_steps;
    e.check_only = o.check_only;
    e.gemm = o.epoch_gemm;
    e.json_path = o.json_path;
    e.variants = split_commas(epoch_variants);
    e.tf32 = epoch_tf32;
    return run_epoch_bench(e);
  }

  if (o.list) {
    // Listing needs no device: the ids come from the same case tables the runner uses.
    for (const int batch : kTrainBatches) {
      for (const GemmCase& g : training_gemms(batch))
        for (const ImplChoice& c : impls_for(g))
          if (o.filter.empty() || (g.group + "/" + g.op + "/" + c.name).find(o.filter) != std::string::npos)
            fmt::print("{}/{}/{}\n", g.group, g.op, c.name);
      for (const char* id : {"fc1.db/column_sums", "fc2.db/column_sums", "softmax_xent/fused",
                             "mark_correct/argmax", "gather/normalize"}) {
        const std::string full = fmt::format("train-b{}/{}", batch, id);
        if (o.filter.empty() || full.find(o.filter) != std::string::npos) fmt::print("{}\n", full);
      }
    }
    for (const char* id : {"kernel/sgd/plain", "kernel/sgd/momentum0.9"})
      if (o.filter.empty() || std::string(id).find(o.filter) != std::string::npos) fmt::print("{}\n", id);
    for (const int batch : kTrainBatches)
      for (const StepVariant& variant : kStepVariants) {
        const std::string full = fmt::format("step-b{}/step/{}", batch, variant.name());
        if (o.filter.empty() || full.find(o.filter) != std::string::npos) fmt::print("{}\n", full);
      }
    for (const GemmCase& g : sweep_gemms(o.quick))
      for (const ImplChoice& c : impls_for(g))
        if (o.filter.empty() || (g.group + "/" + g.op + "/" + c.name).find(o.filter) != std::string::npos)
          fmt::print("{}/{}/{}\n", g.group, g.op, c.name);
    return 0;
  }

  std::string why;
  const int devices = usable_devices(why, o.check_only);
  if (devices == 0) return report_no_gpu(kProgram, why, "The CPU ops have mnist-dp-cpu-bench.");
  if (o.device >= devices)
    throw std::invalid_argument(
        fmt::format("--device {}: this machine has {} CUDA device(s)", o.device, devices));

  Runner runner(o, o.device);
  const nlohmann::json dev = device_json(o.device);
  if (o.check_only) {
    fmt::print("{} --check-only on {} (cc {}, {} SMs), CUDA runtime {}: {}.\n", kProgram,
               dev["name"].get<std::string>(), dev["compute_capability"].get<std::string>(),
               dev["sm_count"].get<int>(), dev["cuda_runtime"].get<std::string>(), check_only_note());
    fmt::print(
        "Each row: its check against the CPU reference, then each of its modes (hot, cold over 2 buffer "
        "sets, graph) launched untimed.\n\n");
  } else {
    fmt::print("{} on {} (cc {}, {} SMs, L2 {} MiB), CUDA runtime {}, driver API {}; host load {:.2f}\n",
               kProgram, dev["name"].get<std::string>(), dev["compute_capability"].get<std::string>(),
               dev["sm_count"].get<int>(), dev["l2_bytes"].get<std::size_t>() >> 20,
               dev["cuda_runtime"].get<std::string>(), dev["cuda_driver_api"].get<std::string>(),
               load_average());
    fmt::print(
        "Median over repeats of (event time of N back-to-back launches) / N. hot: the same buffers each "
        "launch (as in training,\nwhere everything lives in L2); cold: buffers rotated over twice the L2; "
        "graph: the N launches in one CUDA graph.\nRates and ceiling fractions from the hot time (the cold "
        "one where there is no hot). xlaunch: time / (launches x empty-kernel launch).\n\n");
  }
  runner.measure_ceilings();
  runner.print_ceilings();
  runner.print_header();
  run_all(runner, o);
  if (runner.count() == 0) fmt::print("no benchmark matches --filter '{}' (see --list)\n", o.filter);
  if (!o.json_path.empty()) {
    write_json(o.json_path, runner.json(o));
    fmt::print("\nwrote {}\n", o.json_path);
  }
  if (!runner.all_ok()) {
    std::fprintf(stderr, "%s: some checks failed or calls failed: see the check column\n", kProgram);
    return 1;
  }
  if (o.check_only && runner.count() > 0)
    fmt::print("\n{} rows checked, nothing timed{}\n", runner.count(),
               devices_emulated() ? " (emulated devices)" : "");
  return 0;
}

}  // namespace
}  // namespace mnistdp::bench

int main(int argc, char** argv) {
  try {
    return mnistdp::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist-dp-bench: %s\n", e.what());
    return 1;
  }
}
