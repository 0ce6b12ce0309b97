/*
 * keep_dso.c - linked into the MPI programs of the ASan build only: a
 * dlclose that keeps every library loaded.
 *
 * Open MPI and PMIx unload their plugins (mca_*.so) in MPI_Finalize,
 * before LeakSanitizer symbolizes the stacks of what they leaked, at
 * exit.  Their frames then print as "<unknown module>", and no
 * suppression that names Open MPI's or PMIx's libraries (lsan.supp) can
 * match them; the only way left would be a blanket suppression.  With
 * the plugins left loaded, the frames name their files and lsan.supp
 * stays narrow.  Nothing else changes: a process that exits keeps its
 * libraries loaded until then anyway.
 */
int dlclose(void *handle);

int dlclose(void *handle)
{
	(void)handle;
	return 0;
}
