package probe

//go:generate sh -c "gcc -std=gnu11 -Wall -Wextra -Werror -I../../kmod/include -I../include -I../lib -o abigen.bin abigen.c && ./abigen.bin > abi_gen.go && rm -f abigen.bin && gofmt -w abi_gen.go"
