/* leak: the program ends without destroying its objects (finding
 * "leak"); fixed destroys them. */
#include "misuse.h"

int main(int argc, char **argv)
{
	setup(argc, argv, 16);
	if (fixed)
		teardown();
	printf("ok done\n");
	return failed;
}
