/* torch 2.x's torch/version.h, the part the observer reads (see ../README.md). */
#pragma once
#define TORCH_VERSION_MAJOR 2
#define TORCH_VERSION_MINOR 5
#define TORCH_VERSION_PATCH 0
#define TORCH_VERSION "2.5.0"
