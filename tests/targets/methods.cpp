// A C++ method and a function in a namespace: demangled names everywhere, and `this`.
#include <cstdio>

namespace shapes {

class Counter {
 public:
  explicit Counter(long start) : total_(start) {}
  __attribute__((noinline)) long add(long n, bool twice);
  long total() const { return total_; }

 private:
  long total_;
};

long Counter::add(long n, bool twice)
{
  total_ += twice ? 2 * n : n;
  return total_;
}

__attribute__((noinline)) int area(int w, int h)
{
  return w * h;
}

}  // namespace shapes

int main()
{
  shapes::Counter c(100);
  c.add(5, false);
  c.add(7, true);
  std::printf("%ld %d\n", c.total(), shapes::area(6, 7));
  return 0;
}
