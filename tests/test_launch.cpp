// Reading a launcher's environment (host/processes/launch.hpp): every launcher's variables, and every refusal
// named.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <string>

#include "host/processes/launch.hpp"
#include "tests/temp_dir.hpp"

using namespace mnistdp;

namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

const std::map<std::string, std::string> kTorchrun{{"RANK", "3"},
                                                   {"WORLD_SIZE", "16"},
                                                   {"LOCAL_RANK", "3"},
                                                   {"MASTER_ADDR", "node1"},
                                                   {"MASTER_PORT", "29500"}};

std::string refusal(const std::string& mode, const std::map<std::string, std::string>& vars) {
  try {
    detect_launch(mode, env_of(vars));
  } catch (const LaunchError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("no launcher variables: one process", "[launch]") {
  const LaunchInfo info = detect_launch("auto", env_of({}));
  CHECK(info.launcher == Launcher::None);
  CHECK_FALSE(info.multi_process());
  CHECK(info.rank == 0);
  CHECK(info.world_size == 1);
}

TEST_CASE("torchrun's variables", "[launch]") {
  const LaunchInfo info = detect_launch("auto", env_of(kTorchrun));
  CHECK(info.launcher == Launcher::Torchrun);
  CHECK(info.rank == 3);
  CHECK(info.world_size == 16);
  CHECK(info.local_rank == 3);
  CHECK(info.master_addr == "node1");
  CHECK(info.master_port == 29500);
  CHECK(detect_launch("env", env_of(kTorchrun)).launcher == Launcher::Torchrun);
}

TEST_CASE("torchrun's own store on MASTER_PORT: the ranks meet on the next port", "[launch]") {
  auto vars = kTorchrun;
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  CHECK(detect_launch("auto", env_of(vars)).master_port == 29501);
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  CHECK(detect_launch("auto", env_of(vars)).master_port == 29500);
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  vars["MASTER_PORT"] = "65535";
  CHECK(refusal("auto", vars) ==
        "MASTER_PORT=65535 is torchrun's own store, and the ranks meet on the next port: pick a lower "
        "--master-port");
}

TEST_CASE("Open MPI's variables, which need no rendezvous address", "[launch]") {
  const LaunchInfo info = detect_launch("auto", env_of({{"OMPI_COMM_WORLD_RANK", "1"},
                                                        {"OMPI_COMM_WORLD_SIZE", "2"},
                                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}));
  CHECK(info.launcher == Launcher::Mpi);
  CHECK(info.rank == 1);
  CHECK(info.world_size == 2);
  CHECK(info.local_rank == 1);
  CHECK(info.master_addr.empty());
}

TEST_CASE("Slurm's variables, with the rendezvous address from the job script", "[launch]") {
  const LaunchInfo info = detect_launch("auto", env_of({{"SLURM_PROCID", "5"},
                                                        {"SLURM_NTASKS", "8"},
                                                        {"SLURM_LOCALID", "1"},
                                                        {"MASTER_ADDR", "10.0.0.1"},
                                                        {"MASTER_PORT", "29400"}}));
  CHECK(info.launcher == Launcher::Slurm);
  CHECK(info.rank == 5);
  CHECK(info.world_size == 8);
  CHECK(info.local_rank == 1);
  CHECK(refusal("auto", {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}}) ==
        "MASTER_ADDR is not set, but the other variables of a srun launch are (to run one process inside a "
        "Slurm job without srun, pass --launcher none)");
}

TEST_CASE("torchrun inside an srun step: torchrun's variables decide", "[launch]") {
  auto vars = kTorchrun;
  vars.insert({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}});
  CHECK(detect_launch("auto", env_of(vars)).launcher == Launcher::Torchrun);
}

TEST_CASE("a world of one process is a single-process run", "[launch]") {
  const LaunchInfo info =
      detect_launch("auto", env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}}));
  CHECK(info.launcher == Launcher::None);
  CHECK_FALSE(info.multi_process());
}

TEST_CASE("launcher none ignores the environment, and mpi or env insist on theirs", "[launch]") {
  CHECK(detect_launch("none", env_of(kTorchrun)).launcher == Launcher::None);
  CHECK(refusal("mpi", kTorchrun) ==
        "--launcher mpi: OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE are not set; start mnist-dp with Open "
        "MPI's mpirun");
  CHECK(refusal("env", {}) ==
        "--launcher env: neither RANK and WORLD_SIZE (torchrun) nor SLURM_PROCID and SLURM_NTASKS (srun) are "
        "set");
}

TEST_CASE("every bad or missing variable is refused by name", "[launch]") {
  auto with = [](std::map<std::string, std::string> vars, const std::string& name, const std::string& value) {
    vars[name] = value;
    return vars;
  };
  auto without = [](std::map<std::string, std::string> vars, const std::string& name) {
    vars.erase(name);
    return vars;
  };
  CHECK(refusal("auto", without(kTorchrun, "WORLD_SIZE")) ==
        "WORLD_SIZE is not set, but the other variables of a torchrun launch are");
  CHECK(refusal("auto", without(kTorchrun, "RANK")) ==
        "RANK is not set, but the other variables of a torchrun launch are");
  CHECK(refusal("auto", without(kTorchrun, "LOCAL_RANK")) ==
        "LOCAL_RANK is not set, but the other variables of a torchrun launch are");
  CHECK(refusal("auto", without(kTorchrun, "MASTER_PORT")) ==
        "MASTER_PORT is not set, but the other variables of a torchrun launch are");
  CHECK(refusal("auto", with(kTorchrun, "MASTER_ADDR", "")) ==
        "MASTER_ADDR is not set, but the other variables of a torchrun launch are");
  CHECK(refusal("auto", with(kTorchrun, "RANK", "16")) ==
        "RANK=16 is out of range: the rank, with WORLD_SIZE=16 must be from 0 to 15");
  CHECK(refusal("auto", with(kTorchrun, "RANK", "-1")) ==
        "RANK=-1 is out of range: the rank, with WORLD_SIZE=16 must be from 0 to 15");
  CHECK(refusal("auto", with(kTorchrun, "RANK", "-")) ==
        "RANK='-' is not a whole number (the rank, with WORLD_SIZE=16)");
  // A world of one trains as a single process, but not with a rank it cannot hold.
  CHECK(refusal("auto", with(with(kTorchrun, "WORLD_SIZE", "1"), "RANK", "5")) ==
        "RANK=5 is out of range: the rank, with WORLD_SIZE=1 must be from 0 to 0");
  CHECK(refusal("auto", with(kTorchrun, "WORLD_SIZE", "0")) ==
        "WORLD_SIZE=0 is out of range: the number of processes must be from 1 to 1048576");
  CHECK(refusal("auto", with(kTorchrun, "WORLD_SIZE", "two")) ==
        "WORLD_SIZE='two' is not a whole number (the number of processes)");
  CHECK(refusal("auto", with(kTorchrun, "MASTER_PORT", "70000")) ==
        "MASTER_PORT=70000 is out of range: a TCP port must be from 1 to 65535");
  CHECK(refusal("auto", with(kTorchrun, "MASTER_PORT", "29500x")) ==
        "MASTER_PORT='29500x' is not a whole number (a TCP port)");
  CHECK(refusal("auto", with(kTorchrun, "LOCAL_RANK", "99")) ==
        "LOCAL_RANK=99 is out of range: the process's index on its node must be from 0 to 15");
}

TEST_CASE("the run token, from MNISTDP_RUN_TOKEN or the file MNISTDP_RUN_TOKEN_FILE names", "[launch]") {
  auto with = [](std::map<std::string, std::string> vars, const std::string& name, const std::string& value) {
    vars[name] = value;
    return vars;
  };
  const std::string secret = "0123456789abcdef0123";
  CHECK(detect_launch("auto", env_of(kTorchrun)).run_token.empty());
  CHECK(detect_launch("auto", env_of(with(kTorchrun, "MNISTDP_RUN_TOKEN", secret))).run_token == secret);

  const test::TempDir dir;
  const std::string file = (dir / "token").string();
  {
    std::ofstream out(file);
    out << secret << "\n";  // as `echo` or an editor leaves it
  }
  CHECK(detect_launch("auto", env_of(with(kTorchrun, "MNISTDP_RUN_TOKEN_FILE", file))).run_token == secret);
  // Slurm's launch reads it as torchrun's does; mpirun's needs none.
  std::map<std::string, std::string> slurm{{"SLURM_PROCID", "1"},
                                           {"SLURM_NTASKS", "2"},
                                           {"SLURM_LOCALID", "0"},
                                           {"MASTER_ADDR", "node1"},
                                           {"MASTER_PORT", "29500"}};
  CHECK(detect_launch("auto", env_of(with(slurm, "MNISTDP_RUN_TOKEN", secret))).run_token == secret);

  CHECK(refusal("auto", with(kTorchrun, "MNISTDP_RUN_TOKEN", "short")) ==
        "MNISTDP_RUN_TOKEN: the run token is 5 characters long; a secret needs at least 16 (for example: "
        "openssl rand -hex 32)");
  CHECK(refusal("auto", with(with(kTorchrun, "MNISTDP_RUN_TOKEN", secret), "MNISTDP_RUN_TOKEN_FILE", file)) ==
        "MNISTDP_RUN_TOKEN and MNISTDP_RUN_TOKEN_FILE are both set: set one of them");
  const std::string missing = (dir / "no-such-token").string();
  CHECK(refusal("auto", with(kTorchrun, "MNISTDP_RUN_TOKEN_FILE", missing)) ==
        "MNISTDP_RUN_TOKEN_FILE=" + missing + ": cannot read the file: No such file or directory");
  const std::string empty = (dir / "empty-token").string();
  std::ofstream{empty} << "\n";
  CHECK(
      refusal("auto", with(kTorchrun, "MNISTDP_RUN_TOKEN_FILE", empty)) ==
      "MNISTDP_RUN_TOKEN_FILE=" + empty +
          ": the run token is 0 characters long; a secret needs at least 16 (for example: openssl rand -hex "
          "32)");
}
