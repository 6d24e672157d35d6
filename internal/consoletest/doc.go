// Package consoletest drives the operator console (gateway/console) in a real headless
// chromium against the real gateway, consumer and reconciler processes on the local stack:
// what an operator sees must be what the admin API and MySQL say. The tests live in the
// _test files; TestConsoleShots (go test -run TestConsoleShots -shots DIR, or make
// console-shots) saves the screenshots of docs/console/.
package consoletest
