// Entry point of the `weft` tool: dispatches to the registered subcommands.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "cli/command.h"

namespace weft::cli {
std::vector<Command>& command_registry() {
  static std::vector<Command> registry;
  return registry;
}
}  // namespace weft::cli

namespace {

void print_usage() {
  auto cmds = weft::cli::command_registry();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::printf(
      "weft: long-context decode for hybrid LLMs (Gated DeltaNet + gated attention), with the\n"
      "instruments that measure a quantized KV cache.\n\n"
      "usage: weft <command> [options]    (weft <command> --help for its options)\n\ncommands:\n");
  for (const auto& c : cmds) std::printf("  %-10s %s\n", c.name.c_str(), c.summary.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : weft::cli::command_registry()) {
    if (c.name == argv[1]) return c.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "weft: unknown command '%s' (see weft --help)\n", argv[1]);
  return 2;
}
