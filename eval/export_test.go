package eval

// SortWorstFirst is sortWorstFirst, for the tests.
var SortWorstFirst = sortWorstFirst

// Reference is reference, for the tests.
var Reference = reference

// HostOps is hostOps, for the tests.
var HostOps = hostOps
