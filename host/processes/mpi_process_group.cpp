#include "host/processes/mpi_process_group.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <climits>
#include <stdexcept>
#include <string>

namespace mnistdp {

namespace {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<std::size_t>(length));
}

#define MPI_CHECK(call)                                                                                    \
  do {                                                                                                     \
    const int mpi_check_code = (call);                                                                     \
    if (mpi_check_code != MPI_SUCCESS)                                                                     \
      throw std::runtime_error(fmt::format("MPI error: {} failed at {}:{}: {}", #call, __FILE__, __LINE__, \
                                           mpi_error_text(mpi_check_code)));                               \
  } while (0)

int as_count(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw std::invalid_argument(fmt::format("MPI {}: {} elements is more than one call can take", what, n));
  return static_cast<int>(n);
}

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup() {
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
    initialised_ = true;
    // Errors come back as codes to be checked, rather than ending the job from inside the library, so that
    // they reach the user as this program's message.
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    if (provided < MPI_THREAD_FUNNELED)
      throw std::runtime_error("MPI: this MPI library cannot be used from a process with several threads");
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_CHECK(MPI_Get_library_version(version, &length));
    library_ = std::string(version, static_cast<std::size_t>(length));
    if (const auto comma = library_.find(','); comma != std::string::npos) library_.resize(comma);
  }

  ~MpiProcessGroup() override {
    if (initialised_) static_cast<void>(MPI_Finalize());  // errors at exit are dropped: nothing is left to do
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string description() const override { return fmt::format("MPI ({}), {} ranks", library_, size_); }

  void all_reduce_sum(std::span<float> values) override {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), as_count(values.size(), "all-reduce"), MPI_FLOAT,
                            MPI_SUM, MPI_COMM_WORLD));
  }

  bool any(bool flag) override {
    int value = flag ? 1 : 0;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD));
    return value != 0;
  }

  void broadcast(std::span<std::byte> bytes) override {
    MPI_CHECK(MPI_Bcast(bytes.data(), as_count(bytes.size(), "broadcast"), MPI_BYTE, 0, MPI_COMM_WORLD));
  }

  void abort(int /*origin*/, const std::string& /*message*/) noexcept override {
    // The message has been printed by this rank; mpirun reports which rank ended the job.
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 private:
  bool initialised_ = false;
  int rank_ = 0;
  int size_ = 1;
  std::string library_;
};

}  // namespace

bool have_mpi() {
  return true;
}

std::unique_ptr<ProcessGroup> make_mpi_process_group() {
  return std::make_unique<MpiProcessGroup>();
}

}  // namespace mnistdp
