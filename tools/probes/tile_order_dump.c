/*
 * Prints the masked tile order of the kernel (codegen/tile_order.h, the description the PTX is
 * written from) as lines "round cta pair m_block", for tools/probes/l2_order_model.py.
 *   tile_order_dump PAIRS M GRID SECTION
 * Built by that script: cc -Isrc tools/probes/tile_order_dump.c
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "codegen/tile_order.h"

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: tile_order_dump PAIRS M GRID SECTION\n");
        return 2;
    }
    const uint32_t hb = (uint32_t)atol(argv[1]), M = (uint32_t)atol(argv[2]);
    const uint32_t grid = (uint32_t)atol(argv[3]), s = (uint32_t)atol(argv[4]);
    if (!hb || !M || !grid || !s) {
        fprintf(stderr, "tile_order_dump: every argument must be a positive integer\n");
        return 2;
    }
    const uint32_t ntiles = M * hb;
    for (uint32_t r = 0; (uint64_t)r * grid < ntiles; r++)
        for (uint32_t c = 0; c < grid; c++) {
            uint32_t t = fa3_tile_index(1, r, c, grid), pair;
            if (t >= ntiles)
                continue;
            uint32_t m = fa3_tile_decode(1, t, ntiles, M, s, &pair);
            printf("%u %u %u %u\n", r, c, pair, m);
        }
    return 0;
}
