package event_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// Every Kafka client the services build carries the process's Security: a reader or a
// consumer group without a Dialer, a writer without WithSecurity or an admin without
// AdminSecurity would talk plaintext to a SASL_SSL listener and fail only at run time.
// This reads the services' source and names any such call.
func TestEveryServiceKafkaClientIsSecured(t *testing.T) {
	var files []string
	for _, dir := range []string{"gateway", "consumer", "reconciler", "pkg/exception", "deploy/local/kafkainit"} {
		m, err := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CompositeLit:
				if name := selector(x.Type); name == "kafka.ReaderConfig" || name == "kafka.ConsumerGroupConfig" {
					checked++
					if !hasField(x, "Dialer") {
						t.Errorf("%s: %s without a Dialer (event.Security.Dialer)", fset.Position(x.Pos()), name)
					}
				}
			case *ast.CallExpr:
				switch selector(x.Fun) {
				case "event.NewWriter":
					checked++
					if !hasArg(x, "event.WithSecurity") {
						t.Errorf("%s: event.NewWriter without event.WithSecurity", fset.Position(x.Pos()))
					}
				case "event.NewAdmin":
					checked++
					if !hasArg(x, "event.AdminSecurity") {
						t.Errorf("%s: event.NewAdmin without event.AdminSecurity", fset.Position(x.Pos()))
					}
				}
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("found only %d Kafka clients in the services' source: is the test reading the right files?", checked)
	}
}

func selector(e ast.Expr) string {
	if s, ok := e.(*ast.SelectorExpr); ok {
		if id, ok := s.X.(*ast.Ident); ok {
			return id.Name + "." + s.Sel.Name
		}
	}
	return ""
}

func hasField(c *ast.CompositeLit, name string) bool {
	for _, e := range c.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok {
			if id, ok := kv.Key.(*ast.Ident); ok && id.Name == name {
				return true
			}
		}
	}
	return false
}

func hasArg(c *ast.CallExpr, fn string) bool {
	for _, a := range c.Args {
		if call, ok := a.(*ast.CallExpr); ok && selector(call.Fun) == fn {
			return true
		}
	}
	return false
}
