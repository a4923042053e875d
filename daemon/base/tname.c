/* SPDX-License-Identifier: Apache-2.0 */
#include "base/tname.h"

#include <pthread.h>

void devq_tname_push(const char *name, char saved[16])
{
	if (pthread_getname_np(pthread_self(), saved, 16) != 0) {
		saved[0] = '\0';
		return;
	}
	pthread_setname_np(pthread_self(), name);
}

void devq_tname_pop(const char saved[16])
{
	if (saved[0])
		pthread_setname_np(pthread_self(), saved);
}
