/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * driver.cc - runs the helper library (helpers.cu, compiled for the host
 * with shim.h) on one map image, driven by lines on stdin, for the
 * differential test against the executable specification in gpubpf/ptx
 * (helpers_diff_test.go).  Byte strings are hex; "-" is empty.
 *
 *   image HEX                       the map symbol: descriptor + data
 *   lookup SLOT KEY                 -> offset of the value in the image, or 0
 *   update SLOT FLAGS KEY VALUE     -> 0 or -errno
 *   delete KEY                      -> 0 or -errno
 *   ringbuf FLAGS DATA              -> 0 or -errno
 *   dump                            -> HEX of the image
 *
 * SLOT is a per-warp slot: the driver sets %smid = SLOT/64, %warpid = SLOT%64.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

typedef unsigned long long u64;
typedef unsigned int u32;

unsigned int gx_test_smid, gx_test_warpid;

extern "C" u64 __gpuext_h_map_lookup_elem(u64 map, u64 key);
extern "C" u64 __gpuext_h_map_update_elem(u64 map, u64 key, u64 value, u64 flags);
extern "C" u64 __gpuext_h_map_delete_elem(u64 map, u64 key);
extern "C" u64 __gpuext_h_ringbuf_output(u64 map, u64 data, u64 size, u64 flags);

static std::vector<unsigned char> unhex(const std::string &s)
{
	std::vector<unsigned char> b;
	if (s == "-")
		return b;
	for (size_t i = 0; i + 1 < s.size(); i += 2)
		b.push_back((unsigned char)strtoul(s.substr(i, 2).c_str(), nullptr, 16));
	return b;
}

static void set_slot(u64 slot)
{
	gx_test_smid = (u32)(slot / 64);
	gx_test_warpid = (u32)(slot % 64);
}

int main()
{
	u64 *store = nullptr; /* 8-aligned, as the device symbol is */
	size_t size = 0;
	std::string line;

	while (std::getline(std::cin, line)) {
		std::istringstream in(line);
		std::string op;
		in >> op;
		u64 base = (u64)store;
		if (op == "image") {
			std::string h;
			in >> h;
			std::vector<unsigned char> b = unhex(h);
			free(store);
			size = b.size();
			store = (u64 *)calloc((size + 7) / 8 + 1, 8);
			memcpy(store, b.data(), size);
			continue;
		}
		if (op == "lookup") {
			u64 slot;
			std::string k;
			in >> slot >> k;
			set_slot(slot);
			std::vector<unsigned char> key = unhex(k);
			u64 r = __gpuext_h_map_lookup_elem(base, (u64)key.data());
			printf("%llu\n", r ? r - base : 0ull);
		} else if (op == "update") {
			u64 slot, flags;
			std::string k, v;
			in >> slot >> flags >> k >> v;
			set_slot(slot);
			std::vector<unsigned char> key = unhex(k), val = unhex(v);
			printf("%lld\n", (long long)__gpuext_h_map_update_elem(base, (u64)key.data(), (u64)val.data(), flags));
		} else if (op == "delete") {
			std::string k;
			in >> k;
			std::vector<unsigned char> key = unhex(k);
			printf("%lld\n", (long long)__gpuext_h_map_delete_elem(base, (u64)key.data()));
		} else if (op == "ringbuf") {
			u64 flags;
			std::string d;
			in >> flags >> d;
			std::vector<unsigned char> data = unhex(d);
			data.push_back(0); /* a valid address for size 0 */
			printf("%lld\n", (long long)__gpuext_h_ringbuf_output(base, (u64)data.data(), data.size() - 1, flags));
		} else if (op == "dump") {
			const unsigned char *p = (const unsigned char *)store;
			for (size_t i = 0; i < size; i++)
				printf("%02x", p[i]);
			printf("\n");
		} else {
			fprintf(stderr, "driver: unknown op %s\n", op.c_str());
			return 2;
		}
		fflush(stdout);
	}
	return 0;
}
