// The subcommand registry of the `weft` tool. Each src/cli/cmd_*.cpp registers itself with a
// static CommandRegistrar, so adding a subcommand touches no shared file.
#pragma once

#include <string>
#include <vector>

namespace weft::cli {

// argv[0] is the subcommand name; returns the process exit code (0 ok, 1 runtime error,
// 2 usage error).
using CommandFn = int (*)(int argc, char** argv);

struct Command {
  std::string name;
  std::string summary;
  CommandFn run;
};

std::vector<Command>& command_registry();

struct CommandRegistrar {
  CommandRegistrar(const char* name, const char* summary, CommandFn fn) {
    command_registry().push_back({name, summary, fn});
  }
};

}  // namespace weft::cli
