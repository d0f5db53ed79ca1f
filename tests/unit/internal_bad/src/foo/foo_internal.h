/* A fixture for unit_internal_includes_fails: foo's internal header.
 * Never compiled. */
