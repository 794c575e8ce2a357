#include "host/command/cli.hpp"

int main(int argc, char** argv) {
  return mnistdp::run_cli(argc, argv);
}
