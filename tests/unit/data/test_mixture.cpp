// The mixture's plan (data/mixture.h) on its own, without files: exact counts per step and over
// the run, the stated bounds for weights that do not divide the batch, and the integer shares
// against the largest-remainder rule written here.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "normlab/data/mixture.h"
#include "normlab/util/error.h"
#include "support.h"

using namespace normlab;

TEST(Mixture, PlanCountsAreExactAndOneSourceIsTheIdentity) {
  const MixturePlan one({2.5}, 8, 1);
  for (int64_t p : {0, 1, 7, 8, 1000003}) EXPECT_EQ(one.draw(p), std::make_pair(int64_t{0}, p));
  const MixturePlan plan({0.5, 0.25, 0.25}, 12, 9);
  // Each step's 12 slots hold 6, 3 and 3 draws, shuffled; over the run every draw index of a
  // source occurs once.
  std::vector<std::set<int64_t>> seen(3);
  for (int64_t p = 0; p < 1200; ++p) {
    const auto [s, k] = plan.draw(p);
    EXPECT_TRUE(seen[static_cast<size_t>(s)].insert(k).second) << "draw " << k << " twice";
    if (p % 12 == 11) {
      EXPECT_EQ(seen[0].size() + seen[1].size() * 10 + seen[2].size() * 1000,
                static_cast<size_t>((p + 1) / 12 * (6 + 30 + 3000)));
    }
  }
  for (size_t s = 0; s < 3; ++s) {
    const int64_t n = s == 0 ? 600 : 300;
    EXPECT_EQ(static_cast<int64_t>(seen[s].size()), n);
    EXPECT_EQ(*seen[s].rbegin(), n - 1);
  }
  for (int64_t s = 0; s < 3; ++s)
    EXPECT_EQ(plan.draws_before(s, 1200),
              static_cast<int64_t>(seen[static_cast<size_t>(s)].size()));
  // The bounds mixture.h states, for weights that do not divide the batch: every prefix less
  // than one sample from share * n, every step less than two from share * G.
  const MixturePlan odd({0.7, 0.2, 0.1}, 7, 5);
  for (int64_t s = 0; s < 3; ++s)
    for (int64_t n = 0; n <= 7000; ++n) {
      const double want = odd.share(s) * static_cast<double>(n);
      ASSERT_LT(std::abs(static_cast<double>(odd.draws_before(s, n)) - want), 1.0) << s << " " << n;
      if (n % 7 == 0 && n > 0) {
        ASSERT_LT(
            std::abs(static_cast<double>(odd.draws_before(s, n) - odd.draws_before(s, n - 7)) -
                     odd.share(s) * 7),
            2.0);
      }
    }
  EXPECT_NEAR(odd.share(0), 0.7, 1e-7);  // shares of 2^24: within 2^-24 of the weights
  EXPECT_THROW(MixturePlan({0.7, 0.0}, 8, 0), DataError);
  EXPECT_THROW(MixturePlan({0.7, std::nan("")}, 8, 0), DataError);
  // refused weights are printed as written (%g), not rounded to 0.000000
  const auto error_of = [](const std::vector<double>& w) {
    try {
      MixturePlan(w, 8, 0);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of({0.7, 1e-12}),
            "source 1: weight 1e-12 is below 1/2^24 of the total: too small to draw from");
  EXPECT_EQ(error_of({-2.5e-7, 1.0}), "source 0: weight -2.5e-07 is not a positive number");
  EXPECT_EQ(error_of({0.7, 0.0}), "source 1: weight 0 is not a positive number");
}

// The integer shares of 2^24 follow the largest-remainder rule exactly: each weight's floor of
// its exact share, then the units left over, one each, to the largest remainders (the first
// of equal ones). Written here independently of mixture.cpp, on weights whose remainders differ.
TEST(Mixture, SharesAreTheLargestRemainderRule) {
  const double units = 16777216.0;  // 2^24
  auto expected = [&](const std::vector<double>& w) {
    double total = 0;
    for (double x : w) total += x;
    std::vector<double> floor_of, rest;
    double given = 0;
    for (double x : w) {
      const double exact = x / total * units;
      floor_of.push_back(std::floor(exact));
      rest.push_back(exact - std::floor(exact));
      given += std::floor(exact);
    }
    std::vector<size_t> order(w.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return rest[a] > rest[b]; });
    for (size_t k = 0; given < units; ++k, ++given) floor_of[order[k]] += 1;
    return floor_of;
  };
  for (const std::vector<double>& w : std::vector<std::vector<double>>{
           {0.7, 0.2, 0.1}, {1, 2, 4, 8, 16}, {0.3, 0.3, 0.4}, {5, 3}, {1e-3, 1, 1, 1}}) {
    const MixturePlan plan(w, 8, 0);
    const std::vector<double> want = expected(w);
    for (size_t s = 0; s < w.size(); ++s)
      EXPECT_EQ(plan.share(static_cast<int64_t>(s)) * units, want[s]) << "source " << s;
  }
}
