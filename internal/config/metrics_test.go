package config

import (
	"strings"
	"testing"
)

// TestMetricsAddress: metrics are off unless metricsAddress is set; a port
// alone binds this host only; anything but an IP or localhost and a port
// 1-65535 is an error naming the key and the value.
func TestMetricsAddress(t *testing.T) {
	if got := Default().MetricsListen(); got != "" {
		t.Fatalf("default metrics address %q, want off", got)
	}
	for in, want := range map[string]string{
		"9464":          "127.0.0.1:9464",
		":9464":         "127.0.0.1:9464",
		"127.0.0.1:1":   "127.0.0.1:1",
		"0.0.0.0:9464":  "0.0.0.0:9464",
		"[::1]:65535":   "[::1]:65535",
		"[::]:9464":     "[::]:9464",
		"localhost:80":  "localhost:80",
		"10.1.2.3:9464": "10.1.2.3:9464",
	} {
		cfg, err := Parse([]byte(`{"metricsAddress":"`+in+`"}`), "m.json")
		if err != nil {
			t.Errorf("metricsAddress %q: %v", in, err)
			continue
		}
		if got := cfg.MetricsListen(); got != want {
			t.Errorf("metricsAddress %q listens on %q, want %q", in, got, want)
		}
	}
	for _, in := range []string{"0", "65536", "-1", "+80", "080", "9464x", "host.example:9464", "127.0.0.1", "127.0.0.1:",
		"[fe80::1%eth0]:9464", "::1:9464", " 9464", "127.0.0.1:http", "1.2.3.4:5:6"} {
		_, err := Parse([]byte(`{"metricsAddress":"`+in+`"}`), "m.json")
		if err == nil || !strings.Contains(err.Error(), `metricsAddress "`+in+`"`) || !strings.Contains(err.Error(), "m.json") {
			t.Errorf("metricsAddress %q: error %v, want one naming the file, key and value", in, err)
		}
	}
}
