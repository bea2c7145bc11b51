// Native pool bookkeeping and a replay's fresh outputs (pool.h).
#include "pool.h"

#include <algorithm>
#include <string>

#include <nanobind/stl/pair.h>

namespace mlx_amd {

namespace {

constexpr size_t kMinBlock = 256;
constexpr size_t kSmallMax = size_t(1) << 20;
constexpr size_t kLargePage = size_t(2) << 20;
constexpr size_t kSlabMax = size_t(512) << 10;   // classes carved from slabs (memory.SLAB_MAX)
constexpr size_t kSlabBytes = kLargePage;         // one slab (memory.SLAB_BYTES)

std::vector<Outputs*>& registry() {   // live Outputs tables, for drain_freed()
  static auto* r = new std::vector<Outputs*>();
  return *r;
}

}  // namespace

// ------------------------------------------------------------------------ Pool
Pool::Pool(size_t header, nb::callable miss, nb::callable raw_free, int64_t lim)
    : limit(lim), cache_limit(lim), header_(header), miss_(std::move(miss)),
      raw_free_(std::move(raw_free)) {}

std::pair<uintptr_t, size_t> Pool::alloc(int64_t nbytes, uintptr_t prefer) {
  if (nbytes < 0) throw nb::value_error(("allocation size must be >= 0, got " + std::to_string(nbytes)).c_str());
  size_t total = header_ + (nbytes > 0 ? static_cast<size_t>(nbytes) : 1);  // even empty: a data byte
  size_t size, most;
  if (total <= kMinBlock) {
    size = kMinBlock;
    most = 2 * kMinBlock;
  } else {
    size = total <= kSmallMax ? size_t(1) << (64 - __builtin_clzll(total - 1))
                              : (total + kLargePage - 1) / kLargePage * kLargePage;
    most = 2 * total;
  }
  uintptr_t data;
  auto want = prefer ? blocks_.find(prefer) : blocks_.end();
  // (the best-fit search only when the wanted block is not there: a replay's outputs
  // mostly find theirs)
  bool wanted = want != blocks_.end() && !want->second.live && want->second.size == size;
  auto it = wanted ? bins_.find(size) : bins_.lower_bound(size);
  if (wanted) {
    // the wanted block is cached in this very class: take it out of its bin
    auto& v = it->second;
    v.erase(std::find(v.begin(), v.end(), prefer));
    if (v.empty()) bins_.erase(it);
    auto& b = want->second;
    lru_.erase(b.lru);
    b.live = true;
    cached -= static_cast<int64_t>(size);
    ++hits;
    ++preferred;
    data = prefer;
  } else if (it != bins_.end() && it->first <= most) {
    data = it->second.back();
    it->second.pop_back();
    size_t s = it->first;
    if (it->second.empty()) bins_.erase(it);
    auto& b = blocks_.at(data);
    lru_.erase(b.lru);
    b.live = true;
    cached -= static_cast<int64_t>(s);
    ++hits;
    size = s;
  } else {
    ++misses;
    uintptr_t slab = 0, ptr;
    if (size <= kSlabMax) {
      ptr = slot(nbytes, size, &slab);
    } else {
      ptr = nb::cast<uintptr_t>(miss_(nbytes, size));   // may raise MemoryError
      ++driver_allocs;
    }
    data = ptr + header_;
    blocks_[data] = Blk{ptr, size, true, {}, slab};
  }
  active += static_cast<int64_t>(size);
  if (active > peak) peak = active;
  return {data, size};
}

void Pool::free(uintptr_t data) {
  auto it = blocks_.find(data);
  if (it == blocks_.end()) throw nb::value_error("free: not a block of this pool");
  auto& b = it->second;
  if (!b.live) throw nb::value_error("free: double free of a block");
  b.live = false;
  active -= static_cast<int64_t>(b.size);
  bins_[b.size].push_back(data);
  b.lru = lru_.insert(lru_.end(), data);
  cached += static_cast<int64_t>(b.size);
  if (cached > cache_limit) release(cached - cache_limit);
}

uintptr_t Pool::slot(int64_t nbytes, size_t size, uintptr_t* slab) {
  auto o = open_.find(size);
  if (o == open_.end() || o->second.empty()) {
    // (miss_ may release cached blocks, which edits open_: look it up again after)
    auto ptr = nb::cast<uintptr_t>(miss_(nbytes, kSlabBytes));   // may raise MemoryError
    ++driver_allocs;
    Slab s{size, 0, {}};
    for (size_t off = kSlabBytes; off >= size; off -= size) s.free.push_back(ptr + off - size);
    slack += static_cast<int64_t>(kSlabBytes);
    slabs_.emplace(ptr, std::move(s));
    o = open_.try_emplace(size).first;
    o->second.push_back(ptr);
  }
  auto& open = o->second;
  *slab = open.back();
  auto& s = slabs_.at(*slab);
  uintptr_t p = s.free.back();
  s.free.pop_back();
  ++s.used;
  slack -= static_cast<int64_t>(size);
  if (s.free.empty()) open.pop_back();
  return p;
}

void Pool::unslot(const Blk& b) {
  auto it = slabs_.find(b.slab);
  auto& s = it->second;
  s.free.push_back(b.ptr);
  --s.used;
  slack += static_cast<int64_t>(b.size);
  auto& open = open_[s.size];
  if (s.free.size() == 1) open.push_back(b.slab);
  if (s.used == 0) {
    open.erase(std::find(open.begin(), open.end(), b.slab));
    if (open.empty()) open_.erase(s.size);
    slack -= static_cast<int64_t>(kSlabBytes);
    uintptr_t ptr = it->first;
    slabs_.erase(it);
    ++driver_frees;
    raw_free_(ptr);
  }
}

void Pool::release(int64_t nbytes) {
  while (nbytes > 0 && !lru_.empty()) {
    uintptr_t data = lru_.front();
    lru_.pop_front();
    auto it = blocks_.find(data);
    Blk b = it->second;
    blocks_.erase(it);
    auto bin = bins_.find(b.size);
    auto& v = bin->second;
    v.erase(std::find(v.begin(), v.end(), data));
    if (v.empty()) bins_.erase(bin);
    cached -= static_cast<int64_t>(b.size);
    nbytes -= static_cast<int64_t>(b.size);
    if (b.slab) {
      unslot(b);
    } else {
      ++driver_frees;
      raw_free_(b.ptr);
    }
  }
}

bool Pool::live(uintptr_t data) const {
  auto it = blocks_.find(data);
  return it != blocks_.end() && it->second.live;
}

size_t Pool::size_of(uintptr_t data) const {
  auto it = blocks_.find(data);
  if (it == blocks_.end()) throw nb::value_error("size_of: not a block of this pool");
  return it->second.size;
}

// --------------------------------------------------------------------- Outputs
Outputs::Outputs(nb::object host, nb::object device)
    : host_obj_(host), dev_obj_(device), host_(nb::cast<Pool*>(host)),
      dev_(device.is(host) ? nullptr : nb::cast<Pool*>(device)) {
  registry().push_back(this);
}

Outputs::~Outputs() {
  auto& r = registry();
  r.erase(std::remove(r.begin(), r.end(), this), r.end());
}

int64_t Outputs::take(size_t nbytes, Fresh* out, uintptr_t prefer) {
  // unified: the host block is the device one, so it is the one preferred
  uintptr_t h = host_->alloc_data(nbytes, dev_ ? 0 : prefer);
  uintptr_t d = h;
  if (dev_) {
    try {
      d = dev_->alloc_data(nbytes, prefer);
    } catch (...) {
      host_->free(h);
      throw;
    }
  }
  auto key = static_cast<int64_t>(h - kHeader);
  *out = Fresh{h, d, nbytes};
  fresh_.set(static_cast<uintptr_t>(key), *out);
  return key;
}

bool Outputs::release(int64_t token) {
  Fresh f;
  if (!fresh_.erase(static_cast<uintptr_t>(token), &f)) return false;
  host_->free(f.host);
  if (dev_) dev_->free(f.dev);
  return true;
}

nb::list Outputs::adopt() {
  nb::list out;
  fresh_.for_each([&](uintptr_t k, const Fresh& f) {
    out.append(nb::make_tuple(static_cast<int64_t>(k), f.host, f.dev, f.nbytes));
  });
  fresh_.clear();
  return out;
}

bool release_native(int64_t token) {
  for (auto* o : registry()) {
    if (o->release(token)) return true;
  }
  return false;
}

void register_pool(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<Pool>(m, "Pool",
                   "a caching allocator's bookkeeping (runtime/memory.py has the policy)")
      .def(nb::init<size_t, nb::callable, nb::callable, int64_t>(), "header"_a, "miss"_a,
           "raw_free"_a, "limit"_a)
      .def("alloc", &Pool::alloc, "nbytes"_a, "prefer"_a = 0,
           "-> (data pointer, size class); a miss calls miss(); prefer: the cached block wanted")
      .def("free", &Pool::free, "data"_a)
      .def("release", &Pool::release, "nbytes"_a)
      .def("live", &Pool::live, "data"_a)
      .def("size_of", &Pool::size_of, "data"_a)
      .def_prop_ro("header", &Pool::header)
      .def_rw("active", &Pool::active)
      .def_rw("peak", &Pool::peak)
      .def_ro("cached", &Pool::cached)
      .def_ro("slack", &Pool::slack)
      .def_rw("limit", &Pool::limit)
      .def_rw("cache_limit", &Pool::cache_limit)
      .def_ro("hits", &Pool::hits)
      .def_ro("misses", &Pool::misses)
      .def_ro("preferred", &Pool::preferred)
      .def_ro("driver_allocs", &Pool::driver_allocs)
      .def_ro("driver_frees", &Pool::driver_frees);
  nb::class_<Outputs>(m, "Outputs",
                      "output buffers a replay attached, until Python adopts them")
      .def(nb::init<nb::object, nb::object>(), "host"_a, "device"_a)
      .def("adopt", &Outputs::adopt,
           "[(key, host data, device data, nbytes)] of the buffers still here; empties the table")
      .def("take", [](Outputs& o, size_t nbytes, uintptr_t prefer) {
             Outputs::Fresh f;
             int64_t key = o.take(nbytes, &f, prefer);
             return nb::make_tuple(key, f.host, f.dev);
           }, "nbytes"_a, "prefer"_a = 0,
           "a fresh pair, as a replay takes one: (key, host data, device data)")
      .def("has", &Outputs::has, "key"_a)
      .def("release", &Outputs::release, "key"_a,
           "recycle the pair of `key` as a replay does when its array dies; False if not here")
      .def("__len__", &Outputs::size);
}

}  // namespace mlx_amd
