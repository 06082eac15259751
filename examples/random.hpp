// Shared by the examples: a small reproducible random number generator.
#pragma once

#include <cmath>
#include <cstdint>

namespace dlprof_examples {

// SplitMix64's finaliser: every input bit affects every output bit, so nearby seeds give
// unrelated streams.
inline constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// SplitMix64. Unlike <random>'s distributions it gives the same numbers with every standard
// library, so the dataset and the loss curve are reproducible everywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() { return mix64(state_ += 0x9E3779B97F4A7C15ull); }
  float uniform() { return static_cast<float>(next() >> 40) * 0x1p-24f; }  // [0, 1)
  float uniform(float low, float high) { return low + (high - low) * uniform(); }
  float normal() {  // Box-Muller; 1 - uniform() is in (0, 1], so the log is finite
    return std::sqrt(-2.0f * std::log(1.0f - uniform())) * std::cos(6.2831853f * uniform());
  }
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }

 private:
  std::uint64_t state_;
};

}  // namespace dlprof_examples
