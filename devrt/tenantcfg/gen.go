package tenantcfg

//go:generate sh -c "gcc -std=gnu11 -Wall -Wextra -Werror -I../include -o layoutgen.bin layoutgen.c && ./layoutgen.bin > layout_gen.go && rm -f layoutgen.bin && gofmt -w layout_gen.go"
//go:generate sh -c "gcc -std=gnu11 -Wall -Wextra -Werror -I../include -o envgen.bin envgen.c && ./envgen.bin > env_gen.go && rm -f envgen.bin && gofmt -w env_gen.go"
