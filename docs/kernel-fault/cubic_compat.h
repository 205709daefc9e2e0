/* Helpers bpf_cubic.c takes from the selftests' test headers (min, max, before,
 * after); added with -include so the selftests file is built unmodified. */
#include "bpf_tracing_net.h"
#include <bpf/bpf_helpers.h>
#ifndef min
#define min(a, b) ((a) < (b) ? (a) : (b))
#endif
#ifndef max
#define max(a, b) ((a) > (b) ? (a) : (b))
#endif
static bool before(__u32 seq1, __u32 seq2)
{
	return (__s32)(seq1 - seq2) < 0;
}
#define after(seq2, seq1) before(seq1, seq2)
