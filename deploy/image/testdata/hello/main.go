// Command hello is a fixture of deploy/image's tests: a tiny program built
// static (an image binary) and as a PIE (a shared object with a loader,
// which the image must refuse as an executable).
package main

import "fmt"

func main() { fmt.Println("hello") }
