/* SPDX-License-Identifier: Apache-2.0 */
/* Notices cut to what a client keeps (notice.h). */
#include "server/notice.h"

#include <string.h>

size_t devq_notice_fit(char *msg, size_t kept)
{
	size_t len = strlen(msg);
	if (len <= kept)
		return len;
	if (kept < 3) {
		msg[kept] = '\0';
		return kept;
	}
	size_t cut = kept - 3;
	/* Not inside a UTF-8 sequence: back over its continuation bytes. */
	while (cut > 0 && ((unsigned char)msg[cut] & 0xc0) == 0x80)
		cut--;
	memcpy(msg + cut, "...", 4);
	return cut + 3;
}
