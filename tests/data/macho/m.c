/* Built into Mach-O objects by make.sh, for the Mach-O debug information tests. */
enum color { RED, GREEN, BLUE = 7 };
volatile long sink;
long add(long a, long b) { return a + b; }
enum color pick(enum color c, const char *why) { sink += why[0]; return c == RED ? BLUE : RED; }
int main(void) { return (int) add(1, 2) + pick(RED, "x"); }
