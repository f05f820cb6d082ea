// Command-line plumbing shared by the subcommands (cli_options.h).
#include "cli/cli_options.h"

#include <iostream>

namespace trainer {

Status ParseCommandLine(const std::string& command, const std::vector<std::string>& args,
                        po::options_description& options, po::variables_map* vm, bool* help,
                        const po::positional_options_description* positional) {
  options.add_options()("help,h", "show this help");
  try {
    po::command_line_parser parser(args);
    parser.options(options);
    if (positional) parser.positional(*positional);
    po::store(parser.run(), *vm);
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

}  // namespace trainer
