// Closest-name suggestions for "Did you mean ...?" messages.
#pragma once

#include <string>
#include <vector>

namespace trainer {

// Edit distance counting insertions, deletions, substitutions and swaps of adjacent characters.
size_t EditDistance(const std::string& a, const std::string& b);

// The candidate nearest to `word`, or "" when none is close enough to be a plausible typo
// (distance at most max(2, |word| / 3)). Ties go to the earlier candidate.
std::string ClosestMatch(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace trainer
