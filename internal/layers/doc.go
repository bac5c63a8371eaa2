// Package layers holds the repository's import rules as a table and tests
// them: every package has a layer, and a package imports only packages of
// lower layers. It has no code; its test is the rule.
package layers
