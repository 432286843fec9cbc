package launches

//go:generate sh -c "gcc -std=gnu11 -I../../include -o layoutgen.bin layoutgen.c && ./layoutgen.bin > layout_gen.go && rm -f layoutgen.bin && gofmt -w layout_gen.go"
