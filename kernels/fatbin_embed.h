/* SPDX-License-Identifier: Apache-2.0 */
/* The fatbin carried inside the binary (kernels/fatbin_embed.S); linked
 * only into builds with CUDA. */
#ifndef DEVQ_FATBIN_EMBED_H
#define DEVQ_FATBIN_EMBED_H

#include <stdint.h>

extern const unsigned char devq_fatbin_data[];
extern const uint64_t devq_fatbin_size;

#endif
