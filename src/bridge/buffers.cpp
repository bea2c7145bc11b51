// Buffers we hand to MLX, the freed-token queue, and weak watches on MLX's own.
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "bridge.h"
#include "pool.h"

namespace mlx_amd {

namespace {

// Leaked on purpose: deleters can run after static destruction started (MLX
// keeps its scheduler alive until exit), so this must never be destroyed.
struct Registry {
  std::mutex mu;
  std::vector<int64_t> freed;                       // tokens, in deleter order
  // freed.size(), written under mu wherever freed changes: recycle_freed, called after
  // every node of a replay, skips the lock when nothing is queued
  std::atomic<size_t> nfreed{0};
  std::unordered_map<const void*, int64_t> ours;    // Buffer::ptr() -> token
  int64_t live_count = 0;
  int64_t live_bytes = 0;
  std::unordered_map<int64_t, std::weak_ptr<mx::allocator::Data>> watched;
  std::vector<int64_t> expired;                     // found on re-watch of a key
};

Registry& reg() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

mx::allocator::Data make_foreign_data(uintptr_t host_ptr, size_t nbytes,
                                      int64_t token) {
  if (host_ptr == 0 || host_ptr % kAlign != 0) {
    throw nb::value_error(
        ("attach: host_ptr " + std::to_string(host_ptr) +
         " is not a non-null 256-byte-aligned address")
            .c_str());
  }
  if (token < 0) {
    throw nb::value_error("attach: token must be >= 0 (-1 means 'not ours')");
  }
  // MLX reads buffer_size() from this header (CPU allocator layout).
  auto* header = reinterpret_cast<size_t*>(host_ptr - kHeader);
  *header = nbytes;
  mx::allocator::Buffer buf(header);
  if (reinterpret_cast<uintptr_t>(buf.raw_ptr()) != host_ptr) {
    throw std::runtime_error(
        "attach: libmlx's Buffer::raw_ptr() does not match the 8-byte size "
        "header layout of MLX 0.32.4's CPU allocator; refusing to attach");
  }
  auto& r = reg();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.ours[buf.ptr()] = token;
    r.live_count += 1;
    r.live_bytes += static_cast<int64_t>(nbytes);
  }
  return mx::allocator::Data(buf, [token, nbytes](mx::allocator::Buffer b) {
    // No Python, no freeing of the memory: the runtime frees it when it
    // drains the token.
    auto& r = reg();
    std::lock_guard<std::mutex> lock(r.mu);
    r.ours.erase(b.ptr());
    r.freed.push_back(token);
    r.nfreed.store(r.freed.size(), std::memory_order_release);
    r.live_count -= 1;
    r.live_bytes -= static_cast<int64_t>(nbytes);
  });
}

int64_t token_of(const mx::allocator::Buffer& b) {
  auto& r = reg();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.ours.find(b.ptr());
  return it == r.ours.end() ? -1 : it->second;
}

bool any_freed() { return reg().nfreed.load(std::memory_order_acquire) != 0; }

std::vector<int64_t> drain_freed() {
  auto& r = reg();
  std::vector<int64_t> got;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    got.swap(r.freed);
    r.nfreed.store(0, std::memory_order_release);
  }
  // a replay's outputs nobody adopted are recycled here (pool.h); the rest go to Python
  std::vector<int64_t> out;
  out.reserve(got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    try {
      if (!release_native(got[i])) out.push_back(got[i]);
    } catch (...) {
      // a driver free failed (raised in Python): the tokens not handled yet, and the ones
      // for Python, wait for the next drain instead of being lost
      std::lock_guard<std::mutex> lock(r.mu);
      r.freed.insert(r.freed.begin(), got.begin() + static_cast<std::ptrdiff_t>(i) + 1, got.end());
      r.freed.insert(r.freed.begin(), out.begin(), out.end());
      r.nfreed.store(r.freed.size(), std::memory_order_release);
      throw;
    }
  }
  return out;
}

void recycle_freed(Outputs& outs) {
  auto& r = reg();
  // Nothing queued (a view, a node whose inputs live on): no lock. A token a deleter on
  // another thread queues meanwhile is seen at the next call or drain, as with the lock.
  if (r.nfreed.load(std::memory_order_acquire) == 0) return;
  std::vector<int64_t> mine;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.freed.empty()) return;
    auto keep = r.freed.begin();
    for (auto t : r.freed) {
      if (outs.has(t)) {
        mine.push_back(t);
      } else {
        *keep++ = t;
      }
    }
    r.freed.erase(keep, r.freed.end());
    r.nfreed.store(r.freed.size(), std::memory_order_release);
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    try {
      outs.release(mine[i]);
    } catch (...) {
      // a pool callback failed: what is left waits for the next drain instead of leaking
      std::lock_guard<std::mutex> lock(r.mu);
      r.freed.insert(r.freed.begin(), mine.begin() + static_cast<std::ptrdiff_t>(i) + 1, mine.end());
      r.nfreed.store(r.freed.size(), std::memory_order_release);
      throw;
    }
  }
}

std::pair<int64_t, int64_t> live_buffers() {
  auto& r = reg();
  std::lock_guard<std::mutex> lock(r.mu);
  return {r.live_count, r.live_bytes};
}

int64_t watch_data(const std::shared_ptr<mx::allocator::Data>& d) {
  auto key = static_cast<int64_t>(
      reinterpret_cast<uintptr_t>(d->buffer().ptr()));
  auto& r = reg();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.watched.find(key);
  if (it != r.watched.end()) {
    auto cur = it->second.lock();
    if (cur == d) {
      return key;
    }
    // The allocator reused the address: the old Data died unreported.
    if (!cur) {
      r.expired.push_back(key);
    }
    it->second = d;
  } else {
    r.watched.emplace(key, d);
  }
  return key;
}

std::vector<int64_t> expired_keys() {
  auto& r = reg();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<int64_t> out;
  out.swap(r.expired);
  // A scan: the watched set is the uploaded weights, hundreds to thousands.
  for (auto it = r.watched.begin(); it != r.watched.end();) {
    if (it->second.expired()) {
      out.push_back(it->first);
      it = r.watched.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

nb::object buffer_info(const mx::array& a) {
  const auto& dp = a.data_shared_ptr();
  if (!dp) {
    return nb::none();
  }
  auto buf = a.buffer();
  uintptr_t key = reinterpret_cast<uintptr_t>(buf.ptr());
  uintptr_t data_ptr = key ? reinterpret_cast<uintptr_t>(buf.raw_ptr()) : 0;
  size_t nbytes = key ? a.buffer_size() : 0;
  const auto& f = a.flags();
  return nb::make_tuple(
      key, data_ptr, a.offset(), int_tuple(a.strides()), a.data_size(),
      nbytes, bool(f.row_contiguous), bool(f.col_contiguous),
      bool(f.contiguous), token_of(buf));
}

}  // namespace mlx_amd
