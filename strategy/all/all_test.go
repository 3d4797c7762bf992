package all

import "testing"

// TestListIsACopy: changing what List returns does not change the registry.
func TestListIsACopy(t *testing.T) {
	l := List()
	l[0].Name = "changed"
	if List()[0].Name == "changed" {
		t.Fatal("List returned the registry itself")
	}
}
