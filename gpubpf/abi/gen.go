package abi

//go:generate sh -c "gcc -std=gnu11 -Wall -Wextra -Werror -I../../kmod/include -I../../devrt/include -I../../devrt/lib -o abigen.bin abigen.c && ./abigen.bin > abi_gen.go && rm -f abigen.bin && gofmt -w abi_gen.go"
