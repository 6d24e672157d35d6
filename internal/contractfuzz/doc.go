// Package contractfuzz runs Schemathesis, a property-based fuzzer driven by the project's
// OpenAPI documents (docs/api), against a real gateway process on the local stack: the
// public listener with a user token, and the admin listener twice, once with the admin
// bearer token and once signed in as the operator console (cookie plus guard header). Every
// check is on, the number of examples is fixed, each run draws a fresh seed (printed with the
// command that replays it, make contract-fuzz SEED=n) so runs keep finding new cases, and any
// failure fails the test. gateway/contract_test.go checks chosen requests; this one checks the requests a
// client reading only the documents could send. The test lives in the _test file; make test
// runs it as its own step with -schemathesis pointing at the lint venv's copy.
package contractfuzz
