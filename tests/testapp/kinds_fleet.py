"""Job kinds for the tests of this area."""
