#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Self-test of tools/mutate.py's site finder, run by make check
(check-mutate-sites): the identities it gives are contracts (the CI list,
tests/mutants-equivalent.txt), so how it names functions and which
operators it sees are held here.  Python 3 standard library only."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mutate  # noqa: E402

SRC = r"""
static inline __attribute__((always_inline)) int first(int a)
{
	if (a < 3)
		return -1;
	return a + 1;
}

static inline __attribute__((always_inline, unused)) unsigned second(unsigned b)
{
	switch (b) {
	case -1:
		return 0;
	}
	return b < 8 ? b - 1 : b;
}
"""


def sites(src):
    with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
        f.write(src)
    try:
        return {s.ident: s for s in mutate.sites_of(f.name, "x.c")[1]}
    finally:
        os.unlink(f.name)


class Sites(unittest.TestCase):
    def test_attribute_is_not_the_name(self):
        got = sites(SRC)
        funcs = {i.split(":")[1] for i in got}
        self.assertEqual(funcs, {"first", "second"})
        # Each function counts its own sites: both have an lt2le:0.
        self.assertIn("x.c:first:lt2le:0", got)
        self.assertIn("x.c:second:lt2le:0", got)

    def test_a_sign_is_not_a_binary_one(self):
        got = sites(SRC)
        # "return -1" and "case -1" are signs; "a + 1" and "b - 1" are not.
        self.assertEqual(sorted(i for i in got if "1.drop" in i),
                         ["x.c:first:+1.drop:0", "x.c:second:-1.drop:0"])


if __name__ == "__main__":
    unittest.main()
