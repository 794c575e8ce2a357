#include "host/processes/launch.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

namespace mnistdp {

namespace {

// A whole decimal number in [low, high], or LaunchError naming the variable. std::stoi would accept "3x".
int parse_int(const std::string& name, const std::string& value, long low, long high, const char* role) {
  const std::string digits_part = !value.empty() && value[0] == '-' ? value.substr(1) : value;
  const bool digits = !digits_part.empty() && digits_part.size() <= 9 &&
                      digits_part.find_first_not_of("0123456789") == std::string::npos;
  if (!digits) throw LaunchError(fmt::format("{}='{}' is not a whole number ({})", name, value, role));
  const long number = std::stol(value);
  if (number < low || number > high)
    throw LaunchError(
        fmt::format("{}={} is out of range: {} must be from {} to {}", name, number, role, low, high));
  return static_cast<int>(number);
}

struct Names {
  Launcher launcher;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  bool rendezvous;  // needs MASTER_ADDR and MASTER_PORT
};

constexpr Names kOpenMpi{Launcher::Mpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                         "OMPI_COMM_WORLD_LOCAL_RANK", false};
constexpr Names kTorchrun{Launcher::Torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", true};
constexpr Names kSlurm{Launcher::Slurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", true};

bool present(const Names& n, const EnvLookup& env) {
  return env(n.rank).has_value() || env(n.world_size).has_value();
}

std::string required(const EnvLookup& env, const std::string& name, Launcher launcher) {
  std::optional<std::string> value = env(name);
  if (!value || value->empty())
    throw LaunchError(fmt::format(
        "{} is not set, but the other variables of a {} launch are{}", name, launcher_name(launcher),
        launcher == Launcher::Slurm
            ? " (to run one process inside a Slurm job without srun, pass --launcher none)"
            : ""));
  return *value;
}

// The shortest run token taken: a secret that can be guessed guards nothing.
constexpr std::size_t kShortestToken = 16;

std::string run_token(const EnvLookup& env) {
  const std::optional<std::string> value = env("MNISTDP_RUN_TOKEN");
  const std::optional<std::string> file = env("MNISTDP_RUN_TOKEN_FILE");
  if (value && file)
    throw LaunchError("MNISTDP_RUN_TOKEN and MNISTDP_RUN_TOKEN_FILE are both set: set one of them");
  std::string token;
  std::string source = "MNISTDP_RUN_TOKEN";
  if (value) token = *value;
  if (file) {
    source = fmt::format("MNISTDP_RUN_TOKEN_FILE={}", *file);
    std::ifstream in(*file, std::ios::binary);
    if (!in) throw LaunchError(fmt::format("{}: cannot read the file: {}", source, std::strerror(errno)));
    token.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) throw LaunchError(fmt::format("{}: cannot read the file", source));
    // The line an editor or `echo` ends it with is no part of the secret.
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r'))
      token.pop_back();
  }
  if ((value || file) && token.size() < kShortestToken)
    throw LaunchError(
        fmt::format("{}: the run token is {} characters long; a secret needs at least {} (for "
                    "example: openssl rand -hex 32)",
                    source, token.size(), kShortestToken));
  return token;
}

LaunchInfo read_launch(const Names& n, const EnvLookup& env) {
  LaunchInfo info;
  info.world_size =
      parse_int(n.world_size, required(env, n.world_size, n.launcher), 1, 1 << 20, "the number of processes");
  const std::string rank_role = fmt::format("the rank, with {}={}", n.world_size, info.world_size);
  if (info.world_size == 1) {
    // A world of one is a plain single-process run, but a rank it cannot hold still says the launch is wrong.
    if (const std::optional<std::string> rank = env(n.rank))
      parse_int(n.rank, *rank, 0, 0, rank_role.c_str());
    return info;
  }
  info.launcher = n.launcher;
  info.rank = parse_int(n.rank, required(env, n.rank, n.launcher), 0, info.world_size - 1, rank_role.c_str());
  info.local_rank = parse_int(n.local_rank, required(env, n.local_rank, n.launcher), 0, info.world_size - 1,
                              "the process's index on its node");
  if (n.rendezvous) {
    info.master_addr = required(env, "MASTER_ADDR", n.launcher);
    info.master_port =
        parse_int("MASTER_PORT", required(env, "MASTER_PORT", n.launcher), 1, 65535, "a TCP port");
    // torchrun's static rendezvous (its default) keeps its own key-value store listening on MASTER_PORT on
    // the first node, and says so with this variable; the ranks then meet on the next port.
    if (n.launcher == Launcher::Torchrun &&
        env("TORCHELASTIC_USE_AGENT_STORE") == std::optional<std::string>("True")) {
      if (info.master_port == 65535)
        throw LaunchError(
            "MASTER_PORT=65535 is torchrun's own store, and the ranks meet on the next port: pick a "
            "lower --master-port");
      info.master_port += 1;
    }
    info.run_token = run_token(env);
  }
  return info;
}

}  // namespace

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (!value) return std::nullopt;
    return std::string(value);
  };
}

std::string launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::None:
      return "single process";
    case Launcher::Mpi:
      return "mpirun";
    case Launcher::Torchrun:
      return "torchrun";
    case Launcher::Slurm:
      return "srun";
  }
  return "unknown launcher";
}

LaunchInfo detect_launch(const std::string& mode, const EnvLookup& env) {
  if (mode == "none") return {};
  if (mode == "mpi") {
    if (!present(kOpenMpi, env))
      throw LaunchError(
          "--launcher mpi: OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE are not set; start "
          "mnist-dp with Open MPI's mpirun");
    return read_launch(kOpenMpi, env);
  }
  if (mode == "env") {
    if (present(kTorchrun, env)) return read_launch(kTorchrun, env);
    if (present(kSlurm, env)) return read_launch(kSlurm, env);
    throw LaunchError(
        "--launcher env: neither RANK and WORLD_SIZE (torchrun) nor SLURM_PROCID and "
        "SLURM_NTASKS (srun) are set");
  }
  if (mode != "auto")
    throw LaunchError(fmt::format("--launcher {}: the choices are auto, none, mpi and env", mode));
  // torchrun started inside an srun step sees both sets; the innermost launcher, torchrun, decides.
  if (present(kOpenMpi, env)) return read_launch(kOpenMpi, env);
  if (present(kTorchrun, env)) return read_launch(kTorchrun, env);
  if (present(kSlurm, env)) return read_launch(kSlurm, env);
  return {};
}

}  // namespace mnistdp
