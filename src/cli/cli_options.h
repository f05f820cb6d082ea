// Shared Boost.Program_options plumbing for the subcommands: parse a vector of arguments, print
// "--help" with every option's default, and turn parse errors into one usage line (exit 2).
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainer {

namespace po = boost::program_options;

// Parses args into vm. Returns kUsage with a clear line on bad options. *help is set for --help.
Status ParseCommandLine(const std::string& command, const std::vector<std::string>& args,
                        po::options_description& options, po::variables_map* vm, bool* help,
                        const po::positional_options_description* positional = nullptr);
// Whether the -o overrides set `key`, or any key of a section given as "Section.".
bool OverridesKey(const std::vector<std::string>& overrides, const std::string& key);
void PrintCommandHelp(const std::string& command, const std::string& synopsis,
                      const po::options_description& options);

}  // namespace trainer
