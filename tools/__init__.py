"""Tools around the program: the offline plan CLI, the README generator and the Pulumi mocks harness."""
