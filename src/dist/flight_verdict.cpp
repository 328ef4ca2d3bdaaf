#include "cnn/flight_verdict.hpp"

#include "cnn/flight_file.hpp"

namespace cnn {

namespace {

// Ranks named in the line; the rest are counted (the files name them all).
constexpr std::size_t kNamedRanks = 8;

std::string rank_list(const std::vector<int>& ranks, const std::vector<std::string>& hosts) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size() && i < kNamedRanks; ++i) {
    const auto r = static_cast<std::size_t>(ranks[i]);
    if (i > 0) text += ", ";
    text += std::to_string(ranks[i]);
    if (r < hosts.size()) text += " on " + hosts[r];
  }
  if (ranks.size() > kNamedRanks) text += " and " + std::to_string(ranks.size() - kNamedRanks) + " more";
  return text;
}

}  // namespace

Arrivals judge_arrivals(int self, std::uint64_t waited_in, const std::vector<std::optional<std::uint64_t>>& entered,
                        const std::vector<char>& keeps_record) {
  Arrivals a;
  for (std::size_t q = 0; q < entered.size(); ++q) {
    if (static_cast<int>(q) == self) continue;
    if (q >= keeps_record.size() || !keeps_record[q]) {
      a.unknown.push_back(static_cast<int>(q));
    } else if (!entered[q] || *entered[q] < waited_in) {
      a.not_reached.push_back(static_cast<int>(q));
    }
  }
  return a;
}

Arrivals read_arrivals(const FlightSite& site, std::uint64_t waited_in) {
  std::vector<std::optional<std::uint64_t>> entered(static_cast<std::size_t>(site.size));
  for (int q = 0; q < site.size; ++q) {
    if (q == site.rank || !site.keeps_record[static_cast<std::size_t>(q)]) continue;
    const std::optional<FlightFileHeader> h = read_flight_header(site.dir, q);
    // A file of another start of the job (before a resume), or of another rank, is no record of this.
    if (h && h->run == site.run && h->rank == q) entered[static_cast<std::size_t>(q)] = h->entered;
  }
  return judge_arrivals(site.rank, waited_in, entered, site.keeps_record);
}

std::string describe_arrivals(const Arrivals& a, const std::vector<std::string>& hosts) {
  std::string text;
  if (!a.not_reached.empty()) {
    text = rank_list(a.not_reached, hosts) + (a.not_reached.size() == 1 ? " has" : " have") + " not reached it";
  } else if (a.unknown.empty()) {
    text = "every rank has reached it, so the collective itself is stuck (network, MPI library or device)";
  } else {
    text = "every rank that keeps a flight record has reached it";
  }
  if (!a.unknown.empty())
    text += " (" + rank_list(a.unknown, hosts) + " keep" + (a.unknown.size() == 1 ? "s" : "") +
            " no flight record: --stall-timeout 0 there, or RUN_DIR not visible on its node)";
  return text;
}

}  // namespace cnn
