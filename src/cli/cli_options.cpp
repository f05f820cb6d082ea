// Command-line plumbing shared by the subcommands (cli_options.h).
#include "cli/cli_options.h"

#include <iostream>

namespace trainer {
namespace {

// A bare argument to a command that takes none: for one with --config, most likely a config file
// given without -c.
Status StrayArgument(const std::string& command, const std::string& argument,
                     const po::options_description& options) {
  std::string fix = "Pass options only";
  if (options.find_nothrow("config", false) != nullptr)
    fix = "Did you mean -c " + argument + "? Give the config file with -c (or --config)";
  return UsageError("unexpected argument '" + argument + "' (trainer " + command +
                    ", command line): trainer " + command + " takes no bare arguments. " + fix +
                    "; 'trainer " + command + " --help' lists the options");
}

}  // namespace

Status ParseCommandLine(const std::string& command, const std::vector<std::string>& args,
                        po::options_description& options, po::variables_map* vm, bool* help,
                        const po::positional_options_description* positional) {
  options.add_options()("help,h", "show this help");
  try {
    po::command_line_parser parser(args);
    parser.options(options);
    if (positional) parser.positional(*positional);
    const po::parsed_options parsed = parser.run();
    if (positional == nullptr) {  // boost would drop a bare argument without a word
      const std::vector<std::string> stray =
          po::collect_unrecognized(parsed.options, po::include_positional);
      if (!stray.empty()) return StrayArgument(command, stray.front(), options);
    }
    po::store(parsed, *vm);
    *help = vm->count("help") > 0;
    if (!*help) po::notify(*vm);
  } catch (const po::error& e) {
    return UsageError(std::string(e.what()) + " (trainer " + command + "). Run 'trainer " +
                      command + " --help' for the options");
  }
  return Status::Ok();
}

void PrintCommandHelp(const std::string& command, const std::string& synopsis,
                      const po::options_description& options) {
  std::cout << "usage: trainer " << command << " " << synopsis << "\n\n" << options << std::endl;
}

bool OverridesKey(const std::vector<std::string>& overrides, const std::string& key) {
  const std::string prefix = key.back() == '.' ? key : key + "=";
  for (const std::string& o : overrides)
    if (o.compare(0, prefix.size(), prefix) == 0) return true;
  return false;
}

}  // namespace trainer
