package store

import (
	"testing"

	"github.com/leasehold/leasehold/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }
