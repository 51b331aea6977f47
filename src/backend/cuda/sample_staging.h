// Staging of device sampling's rows (cuda_sampling.cc), shared by sample_rows and
// sample_rows_async: the argument checks, and the rows' structured-output masks packed into
// one block of ceil(vocab / 32) words per masked row, which the kernel reads on the device.
#pragma once

#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "core/status.h"

namespace lancet::cuda {

// params[i]'s settings: its row inside [0, rows), finite temperature, top_p in (0, 1], min_p in
// [0, 1], a mask with its words.
Status check_sample_row(const DeviceSampleRow& p, size_t i, int64_t rows);

// Words of one staged mask: ceil(vocab / 32).
int64_t mask_words(int64_t vocab);

// The number of rows with a mask; with words non-null, their masks written there
// ([that many, mask_words(vocab)], in params order), zero past a row's allowed_words and past
// the vocabulary.
int64_t pack_sample_masks(std::span<const DeviceSampleRow> params, int64_t vocab, uint32_t* words);

// Points each masked row of `rows` (the same rows as packed) at its mask in device_words.
void point_sample_masks(std::span<DeviceSampleRow> rows, int64_t vocab, const uint32_t* device_words);

}  // namespace lancet::cuda
