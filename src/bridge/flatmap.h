// An open-addressing hash map from non-zero addresses to small values, for the
// per-evaluation tables of the graph walk (array id -> slot) and of a replay
// (buffer key -> device address). std::unordered_map allocates a node per entry:
// at 40,000 graph nodes that was a malloc per slot and a cache miss per lookup.
// Here the keys sit in one array, linear probing, growth at 1/2 load; erase shifts
// the probe run back (no tombstones), for the one long-lived table (Outputs).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <vector>

namespace mlx_amd {

template <class V>
class FlatMap {
 public:
  explicit FlatMap(size_t expect = 16) { grow(expect); }

  const V* find(uintptr_t k) const {
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == k) return &vals_[i];
      if (keys_[i] == 0) return nullptr;
    }
  }
  // inserts (k, v) unless k is there; true when inserted
  bool emplace(uintptr_t k, V v) { return put(k, v, false); }
  // inserts or overwrites
  void set(uintptr_t k, V v) { put(k, v, true); }
  const V& at(uintptr_t k) const {
    const V* v = find(k);
    if (v == nullptr) throw std::out_of_range("FlatMap::at: key not present");
    return *v;
  }
  void reserve(size_t n) {
    if (2 * n > keys_.size()) grow(n);
  }
  // Empty, for about n keys, keeping the storage when it fits (at most 16x the 2n slots
  // the keys need):
  // a table reused across evaluations frees no large block (see Scratch).
  void reset(size_t n) {
    if (keys_.empty() || 2 * n > keys_.size() || keys_.size() > 32 * (n < 16 ? 16 : n)) {
      keys_.clear();
      keys_.shrink_to_fit();
      vals_.clear();
      vals_.shrink_to_fit();
      size_ = 0;
      grow(n);
      return;
    }
    std::fill(keys_.begin(), keys_.end(), uintptr_t(0));
    size_ = 0;
  }
  size_t size() const { return size_; }
  // removes k (its value into *out when given); true when it was there
  bool erase(uintptr_t k, V* out = nullptr) {
    size_t i = slot(k);
    for (;; i = (i + 1) & mask_) {
      if (keys_[i] == 0) return false;
      if (keys_[i] == k) break;
    }
    if (out != nullptr) *out = vals_[i];
    // each later key of the run moves into the hole unless its home slot lies in (hole, j]
    for (size_t j = (i + 1) & mask_; keys_[j] != 0; j = (j + 1) & mask_) {
      const size_t h = slot(keys_[j]);
      const bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
      if (!stays) {
        keys_[i] = keys_[j];
        vals_[i] = vals_[j];
        i = j;
      }
    }
    keys_[i] = 0;
    --size_;
    return true;
  }
  // f(key, value) for every entry, in table order
  template <class F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < keys_.size(); ++i)
      if (keys_[i] != 0) f(keys_[i], vals_[i]);
  }
  // empty, keeping the storage
  void clear() {
    std::fill(keys_.begin(), keys_.end(), uintptr_t(0));
    size_ = 0;
  }

 private:
  std::vector<uintptr_t> keys_;   // 0: empty
  std::vector<V> vals_;
  size_t mask_ = 0, size_ = 0;

  size_t slot(uintptr_t k) const {
    uint64_t h = static_cast<uint64_t>(k);   // addresses: the low bits are alignment
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return static_cast<size_t>(h) & mask_;
  }
  bool put(uintptr_t k, V v, bool overwrite) {
    if (k == 0) throw std::invalid_argument("FlatMap: key 0 is the empty marker");
    if (2 * (size_ + 1) > keys_.size()) grow(size_ + 1);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == k) {
        if (overwrite) vals_[i] = v;
        return false;
      }
      if (keys_[i] == 0) {
        keys_[i] = k;
        vals_[i] = v;
        ++size_;
        return true;
      }
    }
  }
  void grow(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    if (cap <= keys_.size()) cap = keys_.size() * 2;
    std::vector<uintptr_t> keys(cap, 0);
    std::vector<V> vals(cap);
    keys.swap(keys_);
    vals.swap(vals_);
    mask_ = cap - 1;
    size_ = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] != 0) put(keys[i], vals[i], true);
    }
  }
};

// One reusable instance of T per thread, for tables that live for one evaluation. A 20k-node
// step's tables are megabytes: allocating and freeing them per evaluation made glibc
// consolidate its fast bins (full of the step's freed small arrays) at every free and
// give pages back to the kernel, to fault them in again the next step. A nested use on
// the same thread (a Python callback that evaluates) gets a private instance.
template <class T>
class Scratch {
 public:
  Scratch() : own_(!busy()) {
    if (own_) busy() = true;
    else local_.emplace();
  }
  ~Scratch() {
    if (own_) busy() = false;
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T& get() { return own_ ? shared() : *local_; }

 private:
  bool own_;
  std::optional<T> local_;
  static bool& busy() {
    thread_local bool b = false;
    return b;
  }
  static T& shared() {
    thread_local T t;
    return t;
  }
};

}  // namespace mlx_amd
