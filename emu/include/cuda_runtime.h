#pragma once
// The emulated CUDA runtime and device dialect (docs/emulation.md) in place of the toolkit's header.
#include "emu/dialect.hpp"
#include "emu/runtime.hpp"
