// The caching allocators' bookkeeping, and the fresh output buffers of a replay.
//
// runtime/memory.py states the policy (size classes, best fit bounded at twice
// the request, least recently cached released first, small classes carved from
// slabs) and owns the driver calls: a miss that needs memory calls back into Python
// (limit, driver allocation, out-of-memory error), and so does a release. Everything
// in between (a hit, a free, a slot of a slab) is native, so a replayed step's
// outputs are allocated and recycled without entering Python (DESIGN.md: Python
// keeps the policy, native code executes it).
//
// Slabs: a block of a class up to kSlabMax is a slot of a kSlabBytes driver
// allocation shared by blocks of that class. Releasing such a block (cache limit,
// clear_cache) returns the slot to its slab, and the slab goes back to the driver
// when none of its slots is in use: mlx-lm clears the cache after every prefill
// chunk, and refilling it one driver call per small block cost ~10 ms a prefill.
#pragma once

#include <list>
#include <map>
#include <unordered_map>

#include "bridge.h"
#include "flatmap.h"

namespace mlx_amd {

class Pool {
 public:
  // header: bytes in front of each block's data (HostPool: MLX's size header)
  // miss(nbytes, size) -> driver pointer of a new `size`-byte block (may raise)
  // raw_free(ptr): give a block back to the driver
  Pool(size_t header, nb::callable miss, nb::callable raw_free, int64_t limit);
  // -> (data pointer, size class). prefer: a block to take when it is cached and of the
  // request's size class (a replay asks for the block a node had last time: unchanged
  // kernel arguments leave the graph's nodes as they are)
  std::pair<uintptr_t, size_t> alloc(int64_t nbytes, uintptr_t prefer = 0);
  uintptr_t alloc_data(size_t nbytes, uintptr_t prefer = 0) {
    return alloc(static_cast<int64_t>(nbytes), prefer).first;
  }
  void free(uintptr_t data);
  // cached blocks back to the driver, oldest first, until `nbytes` are released
  void release(int64_t nbytes);
  bool live(uintptr_t data) const;
  size_t size_of(uintptr_t data) const;

  size_t header() const { return header_; }
  int64_t active = 0, peak = 0, cached = 0, limit = 0, cache_limit = 0;
  int64_t slack = 0;       // free slots of slabs: held from the driver, neither active nor cached
  int64_t hits = 0, misses = 0, driver_allocs = 0, driver_frees = 0;
  int64_t preferred = 0;   // hits that were the block asked for

 private:
  struct Blk {
    uintptr_t ptr;
    size_t size;
    bool live;
    std::list<uintptr_t>::iterator lru;   // valid while cached
    uintptr_t slab = 0;                   // the slab it is a slot of (0: its own allocation)
  };
  struct Slab {
    size_t size;                          // its class
    size_t used = 0;                      // slots live or cached
    std::vector<uintptr_t> free;          // free slots, lowest address last
  };
  // a slot of a slab of class `size` (a new slab from the driver when none has one free)
  uintptr_t slot(int64_t nbytes, size_t size, uintptr_t* slab);
  void unslot(const Blk& b);
  size_t header_;
  nb::callable miss_, raw_free_;
  std::unordered_map<uintptr_t, Blk> blocks_;     // data pointer -> block (live or cached)
  std::map<size_t, std::vector<uintptr_t>> bins_; // size class -> cached, most recent last
  std::list<uintptr_t> lru_;                      // cached, oldest first
  std::unordered_map<uintptr_t, Slab> slabs_;     // driver pointer -> slab
  std::map<size_t, std::vector<uintptr_t>> open_; // class -> slabs with a free slot
};

// Output buffers a replay attached to MLX arrays, until Python adopts them into
// its residency records (Residency.adopt) or MLX drops them first (most of a
// step's intermediates): then drain_freed() recycles them here, natively.
class Outputs {
 public:
  // device == host: unified memory (one managed block, data pointer == device pointer)
  Outputs(nb::object host, nb::object device);
  ~Outputs();
  struct Fresh { uintptr_t host, dev; size_t nbytes; };
  // a host + device pair for an nbytes output: (key, host data, device data); prefer:
  // the device data pointer wanted (the one this output had at the previous replay)
  int64_t take(size_t nbytes, Fresh* out, uintptr_t prefer = 0);
  // the buffer of `token` died: recycle it if it is one of ours
  bool release(int64_t token);
  // [(key, host data, device data, nbytes)] of every buffer still here; empties the table
  nb::list adopt();
  bool has(int64_t key) const { return fresh_.find(static_cast<uintptr_t>(key)) != nullptr; }
  size_t size() const { return fresh_.size(); }

 private:
  nb::object host_obj_, dev_obj_;
  Pool* host_;
  Pool* dev_;   // nullptr: unified
  // (open addressing: a replay inserts and erases one entry per output; a std::unordered_map
  // allocated and freed a node for each)
  FlatMap<Fresh> fresh_;
};

// drain_freed(): recycle `token` if a live Outputs table holds it
bool release_native(int64_t token);
// During a replay, after each node: the queued freed tokens that `outs` holds go back
// to the pools now, the rest stay queued for drain_freed(). An intermediate that died
// is reused by a later node, in stream order, as on the node-by-node path, so a replay
// needs no more memory than that path does (a 512-token llama-1b prefill: 719 MiB of
// outputs, most of them dead long before the end).
void recycle_freed(Outputs& outs);

void register_pool(nb::module_& m);

}  // namespace mlx_amd
