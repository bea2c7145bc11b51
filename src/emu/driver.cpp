// The kernel emulator's driver: the part of the CUDA driver API that mlx-amd's driver table
// binds (mlx_amd/runtime/driver/table.py, CUDA column), implemented over host memory, so the
// "emu" driver is the CUDA driver class bound to this library instead of libcuda.
//
// Device memory is host memory (malloc), streams and events complete at once, and a launch
// runs the kernel on fibers inside the module (hip_kernels/include/mlxa/emu.h). A module image
// is an x86-64 shared object built by build_kernels.py's emu32/emu64 targets; it is loaded
// from an anonymous memory file. Graphs keep their kernel nodes and replay them in order.
//
// Environment: MLX_AMD_EMU_WAVE (32 or 64: the device's wave width; it must match the
// modules), MLX_AMD_EMU_MEMORY (device memory in bytes, default 8 GiB), MLX_AMD_EMU_CUS
// (compute units reported, default 4: launchers size grids by it), MLX_AMD_EMU_INTEGRATED=1
// (report an integrated GPU).
#include <dlfcn.h>
#include <elf.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

// CUresult values (cuda.h)
enum : int {
  kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kNotInitialized = 3, kNoDevice = 100,
  kInvalidDevice = 101, kInvalidImage = 200, kInvalidHandle = 400, kNotFound = 500,
  kNotReady = 600, kLaunchFailed = 719, kNotSupported = 801, kUnknown = 999,
};

struct MlxaEmuLaunch {   // mirrors hip_kernels/include/mlxa/emu.h
  unsigned grid[3], block[3];
  unsigned shared_bytes;
  void** params;
  const void* blob;
  size_t blob_size;
  char* error;
  size_t error_size;
};
using Entry = int (*)(MlxaEmuLaunch*, char*);

struct Module;
struct Function {
  Entry entry;
  void (*fault)();   // the module's way out of a faulting kernel (mlxa_emu_fault)
  std::string name;
};
struct Module {
  void* handle = nullptr;
  void (*fault)() = nullptr;
  int fd = -1;   // open while loaded: the loader would take a reused /proc/self/fd/N for a loaded one
  std::map<std::string, std::unique_ptr<Function>> functions;
};
struct Event {
  double ms = 0;
};
struct Node {
  Function* f;
  unsigned grid[3], block[3], shared;
  std::vector<char> args;
};
struct Graph {
  std::vector<std::unique_ptr<Node>> nodes;
};
struct GraphExec {
  std::vector<Node> nodes;
  std::unordered_map<const Node*, size_t> index;   // the graph's node handle -> its copy here
};

struct Device {
  std::mutex mu;
  bool initialized = false;
  int wave = 32, cus = 4, integrated = 0;
  size_t total = 8ull << 30, used = 0;
  std::unordered_map<uintptr_t, size_t> allocations;
  char* stacks = nullptr;
  size_t stack_bytes = 0;
  std::string last_error;
  int ctx = 0, pool = 0;
};
Device& dev() {
  static Device d;
  return d;
}

long long env_number(const char* name, long long fallback) {
  const char* v = getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long long n = strtoll(v, &end, 10);
  return (end && !*end && n > 0) ? n : fallback;
}

double now_ms() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

int fail(int code, const std::string& why) {
  dev().last_error = why;
  return code;
}

int allocate(void** out, size_t n) {
  if (!out) return kInvalidValue;
  Device& d = dev();
  std::lock_guard<std::mutex> g(d.mu);
  if (n == 0) return kInvalidValue;
  if (n > d.total - d.used) return kOutOfMemory;
  void* p = aligned_alloc(256, (n + 255) & ~(size_t)255);
  if (!p) return kOutOfMemory;
  d.allocations[(uintptr_t)p] = n;
  d.used += n;
  *out = p;
  return kSuccess;
}

int release(void* p) {
  if (!p) return kSuccess;
  Device& d = dev();
  std::lock_guard<std::mutex> g(d.mu);
  auto it = d.allocations.find((uintptr_t)p);
  if (it == d.allocations.end()) return kInvalidValue;
  d.used -= it->second;
  d.allocations.erase(it);
  free(p);
  return kSuccess;
}

// An ELF shared object's size from its headers: the section header table ends the file.
size_t elf_size(const unsigned char* p) {
  if (!p || memcmp(p, ELFMAG, SELFMAG) != 0 || p[EI_CLASS] != ELFCLASS64) return 0;
  Elf64_Ehdr h;
  memcpy(&h, p, sizeof h);
  if (h.e_machine != EM_X86_64 || h.e_type != ET_DYN) return 0;
  size_t end = h.e_shoff + (size_t)h.e_shnum * h.e_shentsize;
  const size_t ph = h.e_phoff + (size_t)h.e_phnum * h.e_phentsize;
  return end > ph ? end : ph;
}

// A memory fault inside a kernel leaves the kernel (the module longjmps to its scheduler) and
// fails the launch, instead of ending the process. Installed around each launch, on an
// alternate stack (a fiber's stack may be what overflowed); elsewhere the previous handler runs.
thread_local void (*t_fault)() = nullptr;
struct sigaction g_old_segv, g_old_bus;
void on_fault(int sig, siginfo_t*, void*) {
  if (t_fault) {
    auto f = t_fault;
    t_fault = nullptr;
    f();   // does not return
  }
  sigaction(sig, sig == SIGSEGV ? &g_old_segv : &g_old_bus, nullptr);   // not ours: fault again there
}
void ensure_alt_stack() {
  thread_local bool done = false;
  if (done) return;
  stack_t ss{};
  ss.ss_size = 1 << 16;
  ss.ss_sp = malloc(ss.ss_size);
  if (ss.ss_sp && sigaltstack(&ss, nullptr) == 0) done = true;
}

int run(Function* f, const unsigned grid[3], const unsigned block[3], unsigned shared, void** params,
        const void* blob, size_t blob_size) {
  Device& d = dev();
  std::lock_guard<std::mutex> g(d.mu);   // one launch at a time: the modules' state is global
  if (!d.stacks) {
    const size_t bytes = 1024 * d.stack_bytes;
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return fail(kOutOfMemory, "no address space for the emulator's fiber stacks");
    d.stacks = (char*)m;
  }
  char err[512] = {0};
  MlxaEmuLaunch l{{grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, shared, params, blob,
                  blob_size, err, sizeof err};
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return fail(kInvalidValue, f->name + ": empty grid");
  ensure_alt_stack();
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;   // NODEFER: left by longjmp, never returned from
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_old_segv);
  sigaction(SIGBUS, &sa, &g_old_bus);
  t_fault = f->fault;
  const int r = f->entry(&l, d.stacks);
  t_fault = nullptr;
  sigaction(SIGSEGV, &g_old_segv, nullptr);
  sigaction(SIGBUS, &g_old_bus, nullptr);
  if (r != 0) {
    d.last_error = err;
    return kLaunchFailed;
  }
  return kSuccess;
}

// cuLaunchKernel's `extra`: {1, blob, 2, &size, end}.
bool parse_extra(void** extra, const void** blob, size_t* size) {
  *blob = nullptr;
  *size = 0;
  if (!extra) return true;
  for (int i = 0; i < 16; i += 2) {
    const uintptr_t tag = (uintptr_t)extra[i];
    if (tag == 0) return true;
    if (tag == 1) *blob = extra[i + 1];
    else if (tag == 2) *size = *(const size_t*)extra[i + 1];
    else return false;
  }
  return false;
}

}  // namespace

#define API extern "C" __attribute__((visibility("default")))

API int cuInit(unsigned) {
  Device& d = dev();
  std::lock_guard<std::mutex> g(d.mu);
  if (!d.initialized) {
    d.wave = (int)env_number("MLX_AMD_EMU_WAVE", 32);
    if (d.wave != 32 && d.wave != 64) return fail(kNoDevice, "MLX_AMD_EMU_WAVE must be 32 or 64");
    d.total = (size_t)env_number("MLX_AMD_EMU_MEMORY", 8ll << 30);
    d.cus = (int)env_number("MLX_AMD_EMU_CUS", 4);
    d.integrated = env_number("MLX_AMD_EMU_INTEGRATED", 0) == 1;
    d.stack_bytes = 256 * 1024;
    d.initialized = true;
  }
  return kSuccess;
}
API int cuDriverGetVersion(int* v) { if (!v) return kInvalidValue; *v = 13000; return kSuccess; }
API int cuDeviceGetCount(int* n) { if (!n) return kInvalidValue; *n = dev().initialized ? 1 : 0; return kSuccess; }
API int cuDeviceGet(int* d, int ordinal) {
  if (!d) return kInvalidValue;
  if (ordinal != 0) return kInvalidDevice;
  *d = 0;
  return kSuccess;
}
API int cuDeviceGetAttribute(int* v, int attr, int device) {
  if (!v) return kInvalidValue;
  if (device != 0) return kInvalidDevice;
  const Device& d = dev();
  switch (attr) {
    case 1: *v = 1024; break;               // max threads per block
    case 8: *v = 48 * 1024; break;          // max shared memory per block
    case 10: *v = d.wave; break;            // warp size
    case 13: *v = 1000000; break;           // clock rate, kHz
    case 16: *v = d.cus; break;             // multiprocessors
    case 18: *v = d.integrated; break;
    case 36: *v = 1000000; break;           // memory clock, kHz
    case 37: *v = 256; break;               // memory bus width, bits
    case 38: *v = 4 << 20; break;           // L2 bytes
    case 75: *v = 0; break;                 // compute capability: none
    case 76: *v = 0; break;
    case 83: *v = 1; break;                 // managed memory
    default: return fail(kInvalidValue, "device attribute " + std::to_string(attr) + " is not emulated");
  }
  return kSuccess;
}
API int cuDeviceGetName(char* name, int len, int device) {
  if (!name || len <= 0) return kInvalidValue;
  if (device != 0) return kInvalidDevice;
  snprintf(name, (size_t)len, "mlx-amd kernel emulator (CPU, wave %d)", dev().wave);
  return kSuccess;
}
API int cuDeviceTotalMem_v2(size_t* b, int device) {
  if (!b) return kInvalidValue;
  if (device != 0) return kInvalidDevice;
  *b = dev().total;
  return kSuccess;
}
API int cuDeviceGetPCIBusId(char* bus, int len, int device) {
  if (!bus || len <= 0) return kInvalidValue;
  if (device != 0) return kInvalidDevice;
  snprintf(bus, (size_t)len, "emulator");
  return kSuccess;
}
API int cuDevicePrimaryCtxRetain(void** ctx, int device) {
  if (!ctx) return kInvalidValue;
  if (device != 0) return kInvalidDevice;
  *ctx = &dev().ctx;
  return kSuccess;
}
API int cuCtxSetCurrent(void*) { return kSuccess; }
API int cuMemGetInfo_v2(size_t* free_b, size_t* total) {
  if (!free_b || !total) return kInvalidValue;
  Device& d = dev();
  std::lock_guard<std::mutex> g(d.mu);
  *free_b = d.total - d.used;
  *total = d.total;
  return kSuccess;
}
API int cuCtxSynchronize() { return kSuccess; }

// Streams and events: work completes inside the call that queues it.
API int cuStreamCreate(void** s, unsigned) { if (!s) return kInvalidValue; *s = new int(0); return kSuccess; }
API int cuStreamDestroy_v2(void* s) { delete (int*)s; return kSuccess; }
API int cuStreamSynchronize(void*) { return kSuccess; }
API int cuStreamWaitEvent(void*, void*, unsigned) { return kSuccess; }
API int cuEventCreate(void** e, unsigned) { if (!e) return kInvalidValue; *e = new Event; return kSuccess; }
API int cuEventDestroy_v2(void* e) { delete (Event*)e; return kSuccess; }
API int cuEventRecord(void* e, void*) {
  if (!e) return kInvalidHandle;
  ((Event*)e)->ms = now_ms();
  return kSuccess;
}
API int cuEventSynchronize(void* e) { return e ? kSuccess : kInvalidHandle; }
API int cuEventQuery(void* e) { return e ? kSuccess : kInvalidHandle; }
API int cuEventElapsedTime_v2(float* ms, void* a, void* b) {
  if (!ms || !a || !b) return kInvalidValue;
  *ms = (float)(((Event*)b)->ms - ((Event*)a)->ms);
  return kSuccess;
}
API int cuEventElapsedTime(float* ms, void* a, void* b) { return cuEventElapsedTime_v2(ms, a, b); }

// Memory
API int cuMemAlloc_v2(void** p, size_t n) { return allocate(p, n); }
API int cuMemFree_v2(void* p) { return release(p); }
API int cuMemHostAlloc(void** p, size_t n, unsigned) {
  if (!p) return kInvalidValue;
  *p = aligned_alloc(256, (n + 255) & ~(size_t)255);
  return *p ? kSuccess : kOutOfMemory;
}
API int cuMemFreeHost(void* p) { free(p); return kSuccess; }
API int cuMemAllocManaged(void** p, size_t n, unsigned) { return allocate(p, n); }
API int cuMemAllocAsync(void** p, size_t n, void*) { return allocate(p, n); }
API int cuMemFreeAsync(void* p, void*) { return release(p); }
API int cuDeviceGetDefaultMemPool(void** pool, int device) {
  if (!pool) return kInvalidValue;
  if (device != 0) return kInvalidDevice;
  *pool = &dev().pool;
  return kSuccess;
}
API int cuMemsetD8Async(void* p, unsigned char v, size_t n, void*) {
  if (n && !p) return kInvalidValue;
  memset(p, v, n);
  return kSuccess;
}
API int cuMemcpy(void* dst, const void* src, size_t n) {
  if (n && (!dst || !src)) return kInvalidValue;
  memmove(dst, src, n);
  return kSuccess;
}
API int cuMemcpyAsync(void* dst, const void* src, size_t n, void*) { return cuMemcpy(dst, src, n); }
API int cuMemcpyHtoD_v2(void* dst, const void* src, size_t n) { return cuMemcpy(dst, src, n); }
API int cuMemcpyDtoH_v2(void* dst, const void* src, size_t n) { return cuMemcpy(dst, src, n); }
API int cuMemcpyDtoD_v2(void* dst, const void* src, size_t n) { return cuMemcpy(dst, src, n); }
API int cuMemcpyHtoDAsync_v2(void* dst, const void* src, size_t n, void*) { return cuMemcpy(dst, src, n); }
API int cuMemcpyDtoHAsync_v2(void* dst, const void* src, size_t n, void*) { return cuMemcpy(dst, src, n); }
API int cuMemcpyDtoDAsync_v2(void* dst, const void* src, size_t n, void*) { return cuMemcpy(dst, src, n); }

// Modules: the image is a shared object; it is loaded from an anonymous memory file.
API int cuModuleLoadData(void** out, const void* image) {
  if (!out || !image) return kInvalidValue;
  const size_t size = elf_size((const unsigned char*)image);
  if (!size) return fail(kInvalidImage, "the image is not an x86-64 shared object built for the emulator");
  const int fd = memfd_create("mlxa-emu-module", MFD_CLOEXEC);
  if (fd < 0) return fail(kOutOfMemory, "memfd_create failed");
  const char* p = (const char*)image;
  for (size_t done = 0; done < size;) {
    const ssize_t w = write(fd, p + done, size - done);
    if (w <= 0) {
      close(fd);
      return fail(kOutOfMemory, "cannot write the module image");
    }
    done += (size_t)w;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    close(fd);
    return fail(kInvalidImage, std::string("dlopen of the module failed: ") + dlerror());
  }
  auto wave = (int (*)())dlsym(h, "mlxa_emu_wave_size");
  auto stack = (size_t (*)())dlsym(h, "mlxa_emu_stack_bytes");
  auto fault = (void (*)())dlsym(h, "mlxa_emu_fault");
  if (!wave || !stack || !fault) {
    dlclose(h);
    close(fd);
    return fail(kInvalidImage, "the module has no emulator information (not built by build_kernels.py's emu target)");
  }
  if (wave() != dev().wave || stack() > dev().stack_bytes) {
    const int w = wave();
    dlclose(h);
    close(fd);
    return fail(kInvalidImage, "the module is built for wave " + std::to_string(w) + ", the emulated device runs wave " +
                                   std::to_string(dev().wave) + " (MLX_AMD_EMU_WAVE)");
  }
  auto* m = new Module;
  m->handle = h;
  m->fd = fd;
  m->fault = fault;
  *out = m;
  return kSuccess;
}
API int cuModuleUnload(void* m) {
  if (!m) return kInvalidHandle;
  auto* mod = (Module*)m;
  dlclose(mod->handle);
  close(mod->fd);
  delete mod;
  return kSuccess;
}
API int cuModuleGetFunction(void** out, void* m, const char* name) {
  if (!out || !m || !name) return kInvalidValue;
  auto* mod = (Module*)m;
  auto it = mod->functions.find(name);
  if (it == mod->functions.end()) {
    auto e = (Entry)dlsym(mod->handle, ("mlxa_emu_entry_" + std::string(name)).c_str());
    if (!e) return fail(kNotFound, std::string("no kernel named ") + name + " in the module");
    it = mod->functions.emplace(name, std::unique_ptr<Function>(new Function{e, mod->fault, name})).first;
  }
  *out = it->second.get();
  return kSuccess;
}
API int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shared, void*, void** params, void** extra) {
  if (!f) return kInvalidHandle;
  const void* blob;
  size_t size;
  if (!parse_extra(extra, &blob, &size)) return fail(kInvalidValue, "malformed launch `extra` list");
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return run((Function*)f, grid, block, shared, params, blob, size);
}

// Graphs: kernel nodes with their parameter buffers copied, replayed in insertion order
// (the bridge adds each node after the ones it depends on).
struct NodeParams {   // CUDA_KERNEL_NODE_PARAMS_v2's prefix (offsets in driver/cuda.py)
  void* func;
  unsigned grid[3], block[3], shared;
  void** kernel_params;
  void** extra;
};
static int node_from(const void* p, Node* n) {
  NodeParams np;
  memcpy(&np, p, sizeof np);
  if (!np.func) return kInvalidHandle;
  if (np.kernel_params) return fail(kNotSupported, "emulated graphs take parameter buffers (`extra`) only");
  const void* blob;
  size_t size;
  if (!parse_extra(np.extra, &blob, &size)) return fail(kInvalidValue, "malformed kernel node `extra` list");
  n->f = (Function*)np.func;
  memcpy(n->grid, np.grid, sizeof n->grid);
  memcpy(n->block, np.block, sizeof n->block);
  n->shared = np.shared;
  n->args.assign((const char*)blob, (const char*)blob + size);
  return kSuccess;
}
API int cuGraphCreate(void** g, unsigned) { if (!g) return kInvalidValue; *g = new Graph; return kSuccess; }
API int cuGraphDestroy(void* g) { delete (Graph*)g; return kSuccess; }
API int cuGraphAddKernelNode_v2(void** node, void* g, void** /*deps*/, size_t /*ndeps*/, const void* params) {
  if (!node || !g || !params) return kInvalidValue;
  std::unique_ptr<Node> n(new Node);
  if (const int r = node_from(params, n.get())) return r;
  *node = n.get();
  ((Graph*)g)->nodes.push_back(std::move(n));
  return kSuccess;
}
API int cuGraphAddKernelNode(void** node, void* g, void** deps, size_t ndeps, const void* params) {
  return cuGraphAddKernelNode_v2(node, g, deps, ndeps, params);
}
API int cuGraphInstantiateWithFlags(void** exec, void* g, unsigned long long) {
  if (!exec || !g) return kInvalidValue;
  auto* e = new GraphExec;
  for (auto& n : ((Graph*)g)->nodes) {
    e->index[n.get()] = e->nodes.size();
    e->nodes.push_back(*n);
  }
  *exec = e;
  return kSuccess;
}
API int cuGraphLaunch(void* exec, void*) {
  if (!exec) return kInvalidHandle;
  for (Node& n : ((GraphExec*)exec)->nodes)
    if (const int r = run(n.f, n.grid, n.block, n.shared, nullptr, n.args.data(), n.args.size())) return r;
  return kSuccess;
}
API int cuGraphExecKernelNodeSetParams_v2(void* exec, void* node, const void* params) {
  if (!exec || !node || !params) return kInvalidValue;
  auto* e = (GraphExec*)exec;
  auto it = e->index.find((const Node*)node);
  if (it == e->index.end()) return fail(kInvalidHandle, "the node is not part of this graph");
  Node n;
  if (const int r = node_from(params, &n)) return r;
  e->nodes[it->second] = std::move(n);
  return kSuccess;
}
API int cuGraphExecKernelNodeSetParams(void* exec, void* node, const void* params) {
  return cuGraphExecKernelNodeSetParams_v2(exec, node, params);
}
API int cuGraphExecDestroy(void* exec) { delete (GraphExec*)exec; return kSuccess; }

// Errors: the last failure's own text for launch and image errors.
API int cuGetErrorName(int code, const char** out) {
  if (!out) return kInvalidValue;
  switch (code) {
    case kSuccess: *out = "CUDA_SUCCESS"; break;
    case kInvalidValue: *out = "CUDA_ERROR_INVALID_VALUE"; break;
    case kOutOfMemory: *out = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case kNotInitialized: *out = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case kNoDevice: *out = "CUDA_ERROR_NO_DEVICE"; break;
    case kInvalidDevice: *out = "CUDA_ERROR_INVALID_DEVICE"; break;
    case kInvalidImage: *out = "CUDA_ERROR_INVALID_IMAGE"; break;
    case kInvalidHandle: *out = "CUDA_ERROR_INVALID_HANDLE"; break;
    case kNotFound: *out = "CUDA_ERROR_NOT_FOUND"; break;
    case kNotReady: *out = "CUDA_ERROR_NOT_READY"; break;
    case kLaunchFailed: *out = "CUDA_ERROR_LAUNCH_FAILED"; break;
    case kNotSupported: *out = "CUDA_ERROR_NOT_SUPPORTED"; break;
    default: *out = nullptr; return kInvalidValue;
  }
  return kSuccess;
}
API int cuGetErrorString(int code, const char** out) {
  if (!out) return kInvalidValue;
  static thread_local std::string text;
  const char* name = nullptr;
  if (cuGetErrorName(code, &name) != kSuccess) {
    *out = nullptr;
    return kInvalidValue;
  }
  text = code == kSuccess ? "no error" : dev().last_error.empty() ? name : dev().last_error;
  *out = text.c_str();
  return kSuccess;
}
