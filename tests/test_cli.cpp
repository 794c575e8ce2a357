#include <catch2/catch.hpp>
#include <initializer_list>
#include <string>
#include <vector>

#include "host/command/cli.hpp"

using namespace mnistdp;
using Catch::Matchers::Contains;

namespace {

CommandLine parse(std::initializer_list<const char*> args) {
  std::vector<const char*> argv{"mnist-dp"};
  argv.insert(argv.end(), args.begin(), args.end());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST_CASE("the defaults reproduce the reference program", "[cli]") {
  const CommandLine c = parse({"train"});
  REQUIRE(c.action == CommandLine::Action::Train);
  const TrainOptions& o = c.train;
  CHECK(o.train.epochs == 5);
  CHECK(o.train.batch_size == 64);
  CHECK(o.train.sgd.lr == 0.01f);
  CHECK(o.train.sgd.momentum == 0.0f);
  CHECK(o.train.sgd.weight_decay == 0.0f);
  CHECK_FALSE(o.train.sgd.nesterov);
  CHECK(o.train.log_interval == 100);
  CHECK(o.device == "auto");
  CHECK_FALSE(o.data.has_value());
}

TEST_CASE("options are read", "[cli]") {
  const CommandLine c = parse({"train",
                               "--data",
                               "/tmp/x",
                               "--epochs",
                               "2",
                               "--batch-size",
                               "128",
                               "--lr",
                               "0.1",
                               "--momentum",
                               "0.9",
                               "--nesterov",
                               "--weight-decay",
                               "1e-4",
                               "--seed",
                               "9",
                               "--threads",
                               "2",
                               "--device",
                               "cpu",
                               "--metrics",
                               "m.jsonl",
                               "--max-steps",
                               "10"});
  const TrainOptions& o = c.train;
  CHECK(o.data->string() == "/tmp/x");
  CHECK(o.train.epochs == 2);
  CHECK(o.train.batch_size == 128);
  CHECK(o.train.sgd.lr == 0.1f);
  CHECK(o.train.sgd.momentum == 0.9f);
  CHECK(o.train.sgd.nesterov);
  CHECK(o.train.sgd.weight_decay == 1e-4f);
  CHECK(o.train.seed == 9);
  CHECK(o.threads == 2);
  CHECK(o.device == "cpu");
  CHECK(o.metrics->string() == "m.jsonl");
  CHECK(o.train.max_steps == 10);
}

TEST_CASE("help and version exit cleanly with their text", "[cli]") {
  const CommandLine help = parse({"train", "--help"});
  CHECK(help.action == CommandLine::Action::Exit);
  CHECK_THAT(help.text, Contains("--batch-size") && Contains("--lr") && Contains("--data"));
  const CommandLine version = parse({"--version"});
  CHECK(version.action == CommandLine::Action::Exit);
  CHECK_THAT(version.text, Contains("mnist-dp"));
}

TEST_CASE("every bad value is refused with a message naming the option", "[cli]") {
  CHECK_THROWS_WITH(parse({}), Contains("subcommand"));
  CHECK_THROWS_WITH(parse({"fly"}), Contains("fly"));
  CHECK_THROWS_WITH(parse({"train", "--epochs", "0"}), Contains("--epochs"));
  CHECK_THROWS_WITH(parse({"train", "--epochs", "two"}), Contains("--epochs"));
  CHECK_THROWS_WITH(parse({"train", "--batch-size", "-1"}), Contains("--batch-size"));
  CHECK_THROWS_WITH(parse({"train", "--lr", "-0.1"}), Contains("--lr"));
  CHECK_THROWS_WITH(parse({"train", "--lr", "nan"}), Contains("--lr"));
  CHECK_THROWS_WITH(parse({"train", "--lr", "inf"}), Contains("--lr"));
  CHECK_THROWS_WITH(parse({"train", "--momentum", "-1"}), Contains("--momentum"));
  CHECK_THROWS_WITH(parse({"train", "--dampening", "1.5"}), Contains("--dampening"));
  CHECK_THROWS_WITH(parse({"train", "--weight-decay", "-1"}), Contains("--weight-decay"));
  CHECK_THROWS_WITH(parse({"train", "--threads", "0"}), Contains("--threads"));
  CHECK_THROWS_WITH(parse({"train", "--device", "tpu"}), Contains("--device"));
  CHECK_THROWS_WITH(parse({"train", "--gemm", "fast"}), Contains("--gemm"));
  CHECK_THROWS_WITH(parse({"train", "--log-interval", "0"}), Contains("--log-interval"));
  CHECK_THROWS_WITH(parse({"train", "--seed", "x"}), Contains("--seed"));
  CHECK_THROWS_WITH(parse({"train", "--bogus"}), Contains("--bogus"));
  CHECK_THROWS_WITH(parse({"train", "--nesterov"}), Contains("--nesterov") && Contains("--momentum"));
  CHECK_THROWS_WITH(parse({"train", "--nesterov", "--momentum", "0.9", "--dampening", "0.1"}),
                    Contains("--dampening"));
  CHECK_THROWS_AS(parse({"train", "--epochs", "0"}), UsageError);
}

TEST_CASE("the command line's --activation: the table's names, relu by default, every one on the fused paths",
          "[cli]") {
  CHECK(parse({"train"}).train.train.activation == mnistdp::Activation::relu);
  for (const auto& row : mnistdp::kActivations) {
    CAPTURE(row.name);
    CHECK(parse({"train", "--activation", row.name}).train.train.activation == row.id);
  }
  CHECK_THROWS_WITH(parse({"train", "--activation", "tanh"}), Contains("--activation"));
  CHECK_THROWS_WITH(parse({"train", "--activation", "identity"}), Contains("--activation"));
  for (const char* fused : {"--fused-head", "--fused-step", "--pdl", "--persistent"}) {
    for (const auto& row : mnistdp::kActivations) {
      CAPTURE(fused, row.name);
      CHECK(parse({"train", "--activation", row.name, fused}).train.train.activation == row.id);
    }
  }
  CHECK(parse({"train", "--activation", "gelu", "--help"}).text.find("--activation") != std::string::npos);
}

TEST_CASE("CUDA graphs are off by default and --cuda-graphs turns them on", "[cli]") {
  CHECK_FALSE(parse({"train"}).train.cuda_graphs);
  CHECK(parse({"train", "--cuda-graphs"}).train.cuda_graphs);
}

TEST_CASE("the fast path's options are off by default and their flags turn them on", "[cli]") {
  CHECK_FALSE(parse({"train"}).train.fused_head);
  CHECK_FALSE(parse({"train"}).train.fused_step);
  CHECK(parse({"train", "--fused-head"}).train.fused_head);
  CHECK_FALSE(parse({"train", "--fused-head"}).train.cuda_graphs);
  CHECK(parse({"train", "--fused-step"}).train.fused_step);
  CHECK_FALSE(parse({"train"}).train.pdl);
  CHECK(parse({"train", "--pdl"}).train.pdl);
  CHECK_FALSE(parse({"train"}).train.persistent);
  CHECK(parse({"train", "--persistent"}).train.persistent);
  CHECK(parse({"train"}).train.steps_per_graph == 1);
  CHECK(parse({"train", "--steps-per-graph", "64"}).train.steps_per_graph == 64);
  CHECK_THROWS_AS(parse({"train", "--steps-per-graph", "0"}), UsageError);
  CHECK_FALSE(parse({"train"}).train.tf32);
  CHECK(parse({"train", "--gemm", "cublas", "--tf32"}).train.tf32);
}

TEST_CASE("TF32 without cuBLAS is refused, naming both options", "[cli]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(parse({"train", "--tf32"}), Contains("--tf32") && Contains("--gemm cublas"));
  CHECK_THROWS_WITH(parse({"train", "--gemm", "slab", "--tf32"}), Contains("--gemm cublas"));
}

TEST_CASE("the launcher and the timeout of multi-process runs", "[cli]") {
  const CommandLine defaults = parse({"train"});
  CHECK(defaults.train.launcher == "auto");
  CHECK(defaults.train.timeout_seconds == 300.0);
  const CommandLine given = parse({"train", "--launcher", "none", "--timeout", "2.5"});
  CHECK(given.train.launcher == "none");
  CHECK(given.train.timeout_seconds == 2.5);
  CHECK_THROWS_WITH(parse({"train", "--launcher", "ssh"}), Contains("--launcher"));
  CHECK_THROWS_WITH(parse({"train", "--timeout", "0"}), Contains("--timeout"));
  CHECK_THROWS_WITH(parse({"train", "--timeout", "nan"}), Contains("--timeout"));
}

TEST_CASE("a value the run would change is refused by name", "[cli]") {
  // Each would pass a check of the double but not be what the run uses: a 32-bit float's infinity or 0, a
  // seed that wraps around or saturates.
  CHECK_THROWS_WITH(parse({"train", "--lr", "1e-40"}), Contains("--lr"));
  CHECK_THROWS_WITH(parse({"train", "--lr", "1e99"}), Contains("--lr") && Contains("3.4e38"));
  CHECK_THROWS_WITH(parse({"train", "--lr", "1e-50"}),
                    Contains("--lr") && Contains("too small for a 32-bit float"));
  CHECK_THROWS_WITH(parse({"train", "--weight-decay", "1e-50"}), Contains("--weight-decay"));
  CHECK_THROWS_WITH(parse({"train", "--momentum", "1e39"}), Contains("--momentum"));
  CHECK_THROWS_WITH(parse({"train", "--seed", "-1"}), Contains("--seed") && Contains("18446744073709551615"));
  CHECK_THROWS_WITH(parse({"train", "--seed", "18446744073709551616"}), Contains("--seed"));
  CHECK(parse({"train", "--seed", "18446744073709551615"}).train.train.seed == 18446744073709551615ull);
  CHECK(parse({"train", "--lr", "0"}).train.train.sgd.lr == 0.0f);
  CHECK(parse({"train", "--lr", "1e-30"}).train.train.sgd.lr == 1e-30f);
}

TEST_CASE("a bad value gets one short sentence with the range in plain numbers", "[cli]") {
  auto message = [](std::initializer_list<const char*> args) {
    try {
      parse(args);
    } catch (const UsageError& e) {
      const std::string text = e.what();
      return text.substr(0, text.find('\n'));  // the line that follows only points to --help
    }
    return std::string("accepted");
  };
  CHECK(message({"train", "--lr", "-1"}) == "--lr: -1 is out of range; give a number from 0 to 3.4e38");
  CHECK(message({"train", "--lr", "abc"}) == "--lr: 'abc' is not a number; give one from 0 to 3.4e38");
  CHECK(message({"train", "--epochs", "abc"}) ==
        "--epochs: 'abc' is not a whole number; give one from 1 to 100000");
  CHECK(message({"train", "--epochs", "1.5"}) ==
        "--epochs: '1.5' is not a whole number; give one from 1 to 100000");
  CHECK(message({"train", "--epochs", "0"}) ==
        "--epochs: 0 is out of range; give a whole number from 1 to 100000");
  CHECK(message({"train", "--dampening", "2"}) ==
        "--dampening: 2 is out of range; give a number from 0 to 1");
  CHECK(message({"train", "--max-steps", "-3"}) ==
        "--max-steps: -3 is out of range; give a whole number from 0 to 1000000000000");
  CHECK(message({"train", "--timeout", "1e400"}) ==
        "--timeout: 1e400 is out of range; give a number from 0.1 to 86400");
  CHECK(message({"train", "--accumulate", "0"}) ==
        "--accumulate: 0 is out of range; give a whole number from 1 to 60000");
  for (const char* option : {"--batch-size", "--accumulate", "--log-interval", "--replicas", "--threads",
                             "--steps-per-graph", "--trace-steps", "--check-replicas", "--seed"})
    CHECK_THAT(message({"train", option, "x"}), Contains(option) && Contains("is not a whole number"));
}

TEST_CASE("the options given on the command line are known apart from the defaults", "[cli]") {
  const TrainOptions o =
      parse({"train", "--lr", "0.01", "--nesterov", "--momentum", "0.9", "--gemm", "blocked"}).train;
  CHECK(o.is_given("--lr"));
  CHECK(o.is_given("--nesterov"));
  CHECK(o.is_given("--gemm"));
  CHECK_FALSE(o.is_given("--seed"));
  CHECK_FALSE(o.is_given("--batch-size"));
  // A resumed run's SGD settings are checked once merged with the checkpoint's.
  CHECK_NOTHROW(parse({"train", "--resume", "x.st", "--nesterov"}));
}
