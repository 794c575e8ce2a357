#pragma once
// The emulated CUDA runtime (docs/emulation.md) in place of the toolkit's header.
#include "emu/runtime.hpp"
