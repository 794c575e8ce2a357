// Kernels' resources as an H200 counts them (resources.hpp): the registry of ptxas's figures, the lookup of
// a kernel's figures by its address, and the limits and occupancy of compute capability 9.0.
#include "emu/src/runtime/resources.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>

#include "emu/src/runtime/engine.hpp"

namespace mnistdp::emu {
namespace resources {
namespace {

int round_up(int x, int unit) {
  return (x + unit - 1) / unit * unit;
}

std::string demangled(const char* symbol) {
  int status = 0;
  char* text = abi::__cxa_demangle(symbol, nullptr, nullptr, &status);
  std::string name = status == 0 && text ? text : symbol;
  std::free(text);
  return name;
}

// A mangled name with each anonymous namespace spelled as GCC and Clang spell it (`12_GLOBAL__N_1`): nvcc
// gives each file's its own name (`51_GLOBAL__N__11b99f81_18_persistent_step_cu_3db46d2d`), the host
// compiler the same one everywhere; nothing else of the two manglings differs.
std::string with_host_anonymous_namespaces(std::string_view mangled) {
  constexpr std::string_view kAnonymous = "_GLOBAL__N";
  std::string out;
  std::size_t i = 0;
  while (i < mangled.size()) {
    const bool starts_number = std::isdigit(static_cast<unsigned char>(mangled[i])) &&
                               (i == 0 || !std::isdigit(static_cast<unsigned char>(mangled[i - 1])));
    if (starts_number) {
      std::size_t end = i;
      std::size_t length = 0;
      while (end < mangled.size() && std::isdigit(static_cast<unsigned char>(mangled[end])))
        length = length * 10 + static_cast<std::size_t>(mangled[end++] - '0');
      if (mangled.substr(end, kAnonymous.size()) == kAnonymous && end + length <= mangled.size()) {
        out += "12_GLOBAL__N_1";
        i = end + length;
        continue;
      }
      out.append(mangled.substr(i, end - i));
      i = end;
      continue;
    }
    out += mangled[i++];
  }
  return out;
}

// The symbol table (.symtab) of one executable or shared library, mapped from its file.
class SymbolTable {
 public:
  explicit SymbolTable(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      size_ = static_cast<std::size_t>(st.st_size);
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p != MAP_FAILED) data_ = static_cast<const unsigned char*>(p);
    }
    ::close(fd);
    if (data_) index();
  }
  ~SymbolTable() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
  }
  SymbolTable(const SymbolTable&) = delete;
  SymbolTable& operator=(const SymbolTable&) = delete;

  bool has_symbols() const { return symbols_ != nullptr; }

  // The names of the functions whose value is `value`, without the compiler's clones (`name.constprop.0`).
  std::vector<std::string_view> functions_at(std::uintptr_t value) const {
    std::vector<std::string_view> names;
    for (std::size_t i = 0; i < count_; ++i) {
      const Elf64_Sym& s = symbols_[i];
      if (ELF64_ST_TYPE(s.st_info) != STT_FUNC || s.st_value != value || s.st_name >= names_size_) continue;
      const std::string_view name(names_ + s.st_name);
      if (name.find('.') == std::string_view::npos) names.push_back(name);
    }
    return names;
  }

 private:
  template <typename T>
  const T* at(std::uint64_t offset, std::uint64_t count = 1) const {
    if (offset > size_ || count > (size_ - offset) / sizeof(T)) return nullptr;
    return reinterpret_cast<const T*>(data_ + offset);
  }

  void index() {
    const auto* header = at<Elf64_Ehdr>(0);
    if (!header || std::string_view(reinterpret_cast<const char*>(header->e_ident), 4) != ELFMAG ||
        header->e_ident[EI_CLASS] != ELFCLASS64)
      return;
    const auto* sections = at<Elf64_Shdr>(header->e_shoff, header->e_shnum);
    if (!sections) return;
    for (int i = 0; i < header->e_shnum; ++i) {
      const Elf64_Shdr& s = sections[i];
      if (s.sh_type != SHT_SYMTAB || s.sh_link >= header->e_shnum) continue;
      const Elf64_Shdr& strings = sections[s.sh_link];
      symbols_ = at<Elf64_Sym>(s.sh_offset, s.sh_size / sizeof(Elf64_Sym));
      names_ = reinterpret_cast<const char*>(at<char>(strings.sh_offset, strings.sh_size));
      if (!symbols_ || !names_ || strings.sh_size == 0 || names_[strings.sh_size - 1] != '\0') {
        symbols_ = nullptr;
        return;
      }
      count_ = s.sh_size / sizeof(Elf64_Sym);
      names_size_ = strings.sh_size;
      return;
    }
  }

  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
  const Elf64_Sym* symbols_ = nullptr;
  std::size_t count_ = 0;
  const char* names_ = nullptr;
  std::size_t names_size_ = 0;
};

// The file and load bias of the executable or shared library that holds `address`.
struct LoadedObject {
  std::string path;
  std::uintptr_t bias = 0;
};

std::optional<LoadedObject> object_holding(const void* address) {
  struct Search {
    std::uintptr_t address;
    std::optional<LoadedObject> found;
  } search{reinterpret_cast<std::uintptr_t>(address), std::nullopt};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) -> int {
        auto& s = *static_cast<Search*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& segment = info->dlpi_phdr[i];
          const std::uintptr_t start = info->dlpi_addr + segment.p_vaddr;
          if (segment.p_type != PT_LOAD || s.address < start || s.address >= start + segment.p_memsz)
            continue;
          const bool program = !info->dlpi_name || !*info->dlpi_name;
          s.found = LoadedObject{program ? "/proc/self/exe" : info->dlpi_name, info->dlpi_addr};
          return 1;
        }
        return 0;
      },
      &search);
  return search.found;
}

struct Registration {
  std::string source;
  const KernelResources* kernels;
  std::size_t count;
};

class Registry {
 public:
  static Registry& get() {
    static Registry registry;
    return registry;
  }

  void add(const char* source, const KernelResources* kernels, std::size_t count) {
    std::lock_guard lock(mutex_);
    pending_.push_back({source, kernels, count});
  }

  const Kernel* find(const void* address, std::string& why) {
    std::lock_guard lock(mutex_);
    take_pending();
    if (auto it = by_address_.find(address); it != by_address_.end()) return it->second;
    const std::optional<LoadedObject> object = object_holding(address);
    if (!object) {
      why = "no loaded file holds its address";
      return nullptr;
    }
    std::unique_ptr<SymbolTable>& table = tables_[object->path];
    if (!table) table = std::make_unique<SymbolTable>(object->path);
    if (!table->has_symbols()) {
      why = object->path +
            " has no symbol table to find the kernel in (the emulated build is not to be stripped)";
      return nullptr;
    }
    const std::vector<std::string_view> names =
        table->functions_at(reinterpret_cast<std::uintptr_t>(address) - object->bias);
    if (names.empty()) {
      why = "no function symbol of " + object->path + " is at its address";
      return nullptr;
    }
    for (const std::string_view name : names) {
      auto it = by_symbol_.find(with_host_anonymous_namespaces(name));
      if (it == by_symbol_.end()) continue;
      if (!it->second.conflict.empty()) {
        why = it->second.conflict;
        return nullptr;
      }
      by_address_[address] = &it->second.kernel;
      return &it->second.kernel;
    }
    why = "ptxas reported no kernel " + demangled(std::string(names.front()).c_str()) +
          " in any .cu file of this program: is it compiled through mnistdp_cuda_sources (CMakeLists.txt), "
          "or did its file gain its first kernel since CMake last ran?";
    return nullptr;
  }

  std::vector<Kernel> all() {
    std::lock_guard lock(mutex_);
    take_pending();
    std::vector<Kernel> kernels;
    for (const auto& [symbol, entry] : by_symbol_)
      kernels.push_back(entry.kernel);
    return kernels;
  }

 private:
  struct Entry {
    Kernel kernel;
    std::string conflict;  // two files' kernels of one name and different figures: which, to refuse it
  };

  void take_pending() {
    for (const Registration& r : pending_) {
      for (std::size_t i = 0; i < r.count; ++i) {
        const KernelResources& k = r.kernels[i];
        Kernel kernel{k, demangled(k.symbol), r.source, max_threads_per_block(k)};
        const std::string key = with_host_anonymous_namespaces(k.symbol);
        auto [it, added] = by_symbol_.try_emplace(key, Entry{kernel, {}});
        const KernelResources& had = it->second.kernel.figures;
        if (!added && (had.registers != k.registers || had.barriers != k.barriers ||
                       had.static_shared != k.static_shared || had.stack != k.stack ||
                       had.max_threads != k.max_threads)) {
          it->second.conflict = "kernels of one name in " + it->second.kernel.source + " and " + r.source +
                                " have different ptxas figures, and the emulator cannot tell them apart";
        }
      }
    }
    pending_.clear();
  }

  std::mutex mutex_;
  std::vector<Registration> pending_;
  std::map<std::string, Entry> by_symbol_;  // by nvcc's symbol with the host's anonymous namespaces
  std::map<const void*, const Kernel*> by_address_;
  std::map<std::string, std::unique_ptr<SymbolTable>> tables_;
};

// cudaFuncSetAttribute's cudaFuncAttributeMaxDynamicSharedMemorySize, by device and kernel.
struct Attributes {
  std::mutex mutex;
  std::map<std::pair<int, const void*>, std::size_t> max_dynamic_shared;
};

Attributes& attributes() {
  static Attributes a;
  return a;
}

}  // namespace

const Kernel* find(const void* address, std::string& why) {
  return Registry::get().find(address, why);
}

std::vector<Kernel> registered() {
  return Registry::get().all();
}

int max_threads_per_block(const KernelResources& figures) {
  int threads = kMaxThreadsPerBlock;
  if (figures.max_threads > 0) threads = std::min(threads, figures.max_threads);
  const int per_warp = round_up(figures.registers * kWarpSize, kRegisterGranularity);
  if (per_warp > 0) {
    // The hardware takes a block's warps to be allocated registers in every sub-partition at once.
    const int warps = kRegistersPerBlock / per_warp / kSubPartitions * kSubPartitions;
    threads = std::min(threads, warps * kWarpSize);
  }
  return threads;
}

int blocks_per_sm(const KernelResources& figures, int block_threads, std::size_t dynamic_shared,
                  std::size_t max_dynamic_shared) {
  if (block_threads < 1 || block_threads > kMaxThreadsPerBlock) return 0;
  const int warps = (block_threads + kWarpSize - 1) / kWarpSize;
  const int by_warps = kMaxThreadsPerSm / kWarpSize / warps;
  // Registers: a warp's in units of 256, each of the 4 sub-partitions holding a quarter of the SM's.
  int by_registers = INT_MAX;
  const int per_warp = round_up(figures.registers * kWarpSize, kRegisterGranularity);
  if (per_warp * round_up(warps, kSubPartitions) > kRegistersPerBlock ||
      per_warp * warps > kRegistersPerBlock || figures.registers > kMaxRegistersPerThread) {
    by_registers = 0;
  } else if (per_warp > 0) {
    by_registers = kRegistersPerSm / kSubPartitions / per_warp * kSubPartitions / warps;
  }
  // Shared memory: the static, the dynamic and the driver's reserve, in units of 128 bytes, within the
  // block's limit (raised by cudaFuncSetAttribute), of the SM's 228 KiB.
  const std::size_t static_and_reserved = figures.static_shared + kSharedReservedPerBlock;
  const std::size_t allocated = (static_and_reserved + dynamic_shared + kSharedGranularity - 1) /
                                kSharedGranularity * kSharedGranularity;
  const std::size_t block_limit =
      (static_and_reserved + max_dynamic_shared > kSharedPerBlock ? kSharedPerBlockOptin : kSharedPerBlock) +
      kSharedReservedPerBlock;
  const int by_shared = dynamic_shared > max_dynamic_shared || allocated > block_limit
                            ? 0
                            : static_cast<int>(kSharedPerSm / allocated);
  const int by_barriers = figures.barriers > 0 ? kBarriersPerSm / figures.barriers : INT_MAX;
  return std::min({by_warps, kMaxBlocksPerSm, by_registers, by_shared, by_barriers});
}

std::size_t max_dynamic_shared(int device, const void* address, const Kernel& kernel) {
  Attributes& a = attributes();
  std::lock_guard lock(a.mutex);
  if (auto it = a.max_dynamic_shared.find({device, address}); it != a.max_dynamic_shared.end())
    return it->second;
  return kSharedPerBlock - std::min(kSharedPerBlock, kernel.figures.static_shared);
}

void forget_attributes(int device) {
  Attributes& a = attributes();
  std::lock_guard lock(a.mutex);
  std::erase_if(a.max_dynamic_shared, [device](const auto& entry) { return entry.first.first == device; });
}

}  // namespace resources

bool register_kernel_resources(const char* source, const KernelResources* kernels, std::size_t count) {
  resources::Registry::get().add(source, kernels, count);
  return true;
}

namespace {

// The registered kernel at `kernel`, or nullptr with cudaErrorInvalidDeviceFunction recorded, as for a
// kernel with no code for the device.
const resources::Kernel* kernel_or_refuse(const void* kernel, const char* call) {
  std::string why;
  if (const resources::Kernel* k = resources::find(kernel, why)) return k;
  Engine::get().set_detail(cudaErrorInvalidDeviceFunction, std::string("emulated CUDA: ") + call + " of " +
                                                               kernel_name_of(kernel) +
                                                               ": no ptxas figures for it (" + why + ")");
  record(cudaErrorInvalidDeviceFunction);
  return nullptr;
}

}  // namespace

cudaError_t function_attributes(cudaFuncAttributes* attributes, const void* kernel) {
  if (!attributes) return record(cudaErrorInvalidValue);
  if (Engine::get().devices.empty()) return record(cudaErrorNoDevice);
  const resources::Kernel* k = kernel_or_refuse(kernel, "cudaFuncGetAttributes");
  if (!k) return cudaErrorInvalidDeviceFunction;
  *attributes = cudaFuncAttributes{};
  attributes->sharedSizeBytes = k->figures.static_shared;
  attributes->localSizeBytes = k->figures.stack;
  attributes->maxThreadsPerBlock = k->max_threads_per_block;
  attributes->numRegs = k->figures.registers;
  attributes->ptxVersion = 90;  // the figures are ptxas's for sm_90, of PTX for compute_90
  attributes->binaryVersion = 90;
  attributes->maxDynamicSharedSizeBytes =
      static_cast<int>(resources::max_dynamic_shared(Engine::get().current_device(), kernel, *k));
  return cudaSuccess;
}

cudaError_t set_max_dynamic_shared(const void* kernel, int bytes) {
  Engine& e = Engine::get();
  if (e.devices.empty()) return record(cudaErrorNoDevice);
  const resources::Kernel* k = kernel_or_refuse(kernel, "cudaFuncSetAttribute");
  if (!k) return cudaErrorInvalidDeviceFunction;
  if (bytes < 0 ||
      k->figures.static_shared + static_cast<std::size_t>(bytes) > resources::kSharedPerBlockOptin) {
    e.set_detail(cudaErrorInvalidValue, "emulated CUDA: cudaFuncSetAttribute of " + k->name + ": " +
                                            std::to_string(bytes) +
                                            " bytes of dynamic shared memory beside its " +
                                            std::to_string(k->figures.static_shared) +
                                            " static, above the 227 KiB a block may have");
    return record(cudaErrorInvalidValue);
  }
  resources::Attributes& a = resources::attributes();
  std::lock_guard lock(a.mutex);
  a.max_dynamic_shared[{e.current_device(), kernel}] = static_cast<std::size_t>(bytes);
  return cudaSuccess;
}

cudaError_t max_active_blocks_per_sm(int* blocks, const void* kernel, int block_size,
                                     std::size_t shared_bytes) {
  if (!blocks || block_size < 1) return record(cudaErrorInvalidValue);
  if (Engine::get().devices.empty()) return record(cudaErrorNoDevice);
  const resources::Kernel* k = kernel_or_refuse(kernel, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  if (!k) return cudaErrorInvalidDeviceFunction;
  // A block the kernel cannot be launched with is never resident.
  *blocks = block_size > k->max_threads_per_block
                ? 0
                : resources::blocks_per_sm(
                      k->figures, block_size, shared_bytes,
                      resources::max_dynamic_shared(Engine::get().current_device(), kernel, *k));
  return cudaSuccess;
}

}  // namespace mnistdp::emu
