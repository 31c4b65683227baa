package eval

// SortWorstFirst is sortWorstFirst, for the tests.
var SortWorstFirst = sortWorstFirst
