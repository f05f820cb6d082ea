// The route policy's statistic and decision (route_policy.h).
#include "model/route_policy.h"

#include <algorithm>

namespace trainer {

float RouteTime(const std::vector<float>& runs_ms) {
  double sum = 0;
  int runs = 0;
  for (float ms : runs_ms)
    if (ms >= 0) sum += ms, ++runs;
  return runs > 0 ? static_cast<float>(sum / runs) : -1.f;
}

std::vector<float> RouteTimes(const std::vector<bool>& refused, const std::vector<float>& run_ms) {
  const int candidates = static_cast<int>(refused.size());
  std::vector<std::vector<float>> runs(candidates);
  for (size_t run = 0; run < run_ms.size(); ++run)
    runs[RouteTurnCandidate(static_cast<int>(run), candidates)].push_back(run_ms[run]);
  std::vector<float> times(candidates, -1.f);
  for (int c = 0; c < candidates; ++c)
    if (!refused[c]) times[c] = RouteTime(runs[c]);
  return times;
}

int RouteChoice(const std::vector<float>& times_ms) {
  int choice = -1;
  for (int c = 0; c < static_cast<int>(times_ms.size()); ++c)
    if (times_ms[c] >= 0 && (choice < 0 || times_ms[c] < times_ms[choice])) choice = c;
  return choice;
}

}  // namespace trainer
