// A C# program over octopt's C ABI (P/Invoke), compiled with Mono's mcs by test_csharp.py:
//   LeastSquares.exe PROBLEM OUT STEPS
// reads a diagonal least-squares problem (float32 a, b and the start w, little-endian, n each) from
// PROBLEM, minimizes sum((a w - b)^2) with 8-bit Adam for STEPS steps and writes w to OUT; the test
// runs the same steps with octopt.Adam in Python and compares the bytes.
using System;
using System.IO;
using System.Runtime.InteropServices;

static class Octopt {
  const string Lib = "octopt_c";  // liboctopt_c.so / octopt_c.dll, found on the library path
  public const int Ok = 0, Float32 = 0, Cpu = -1;

  [DllImport(Lib)] public static extern int octopt_abi_version();
  // a pointer to the library's own string: read it, never free it (so IntPtr, not string)
  [DllImport(Lib)] static extern IntPtr octopt_last_error();
  [DllImport(Lib)] public static extern int octopt_optimizer_create(string name, out IntPtr opt);
  [DllImport(Lib)] public static extern void octopt_optimizer_destroy(IntPtr opt);
  [DllImport(Lib)] public static extern int octopt_set(IntPtr opt, string key, double value);
  [DllImport(Lib)] public static extern int octopt_add_param(IntPtr opt, int group, IntPtr data, int dtype,
                                                             long[] shape, int ndim, int device, IntPtr index);
  [DllImport(Lib)] public static extern int octopt_step(IntPtr opt, IntPtr[] grads, int[] gradDtypes, UIntPtr nGrads,
                                                        IntPtr stream, out long skippedBlocks);
  [DllImport(Lib)] public static extern int octopt_state_bytes(IntPtr opt, out UIntPtr bytes);

  public static string LastError() { return Marshal.PtrToStringAnsi(octopt_last_error()); }

  public static void Check(int status) {
    if (status != Ok) throw new InvalidOperationException("octopt status " + status + ": " + LastError());
  }
}

static class LeastSquares {
  static float[] Read(BinaryReader r, int n) {
    var v = new float[n];
    for (int i = 0; i < n; ++i) v[i] = r.ReadSingle();
    return v;
  }

  static int Main(string[] args) {
    byte[] problem = File.ReadAllBytes(args[0]);
    int n = problem.Length / 12, steps = int.Parse(args[2]);
    float[] a, b, w;
    using (var r = new BinaryReader(new MemoryStream(problem))) {
      a = Read(r, n);
      b = Read(r, n);
      w = Read(r, n);
    }
    Console.WriteLine("octopt C ABI version " + Octopt.octopt_abi_version());

    // a mistake is a status and a message
    IntPtr none;
    int status = Octopt.octopt_optimizer_create("adamx", out none);
    Console.WriteLine("create(\"adamx\"): status " + status + ": " + Octopt.LastError());

    // the parameter and its gradient stay pinned while the optimizer holds their addresses
    var wPin = GCHandle.Alloc(w, GCHandleType.Pinned);
    var grad = new float[n];
    var gPin = GCHandle.Alloc(grad, GCHandleType.Pinned);
    IntPtr opt;
    Octopt.Check(Octopt.octopt_optimizer_create("adam", out opt));
    Octopt.Check(Octopt.octopt_set(opt, "lr", 0.1));
    Octopt.Check(Octopt.octopt_set(opt, "bits", 8));
    Octopt.Check(Octopt.octopt_add_param(opt, 0, wPin.AddrOfPinnedObject(), Octopt.Float32, new long[] { n }, 1,
                                         Octopt.Cpu, IntPtr.Zero));
    var grads = new IntPtr[] { gPin.AddrOfPinnedObject() };
    double loss = 0;
    for (int t = 0; t < steps; ++t) {
      loss = 0;
      for (int i = 0; i < n; ++i) {
        float r = a[i] * w[i] - b[i];
        grad[i] = 2f * a[i] * r;
        loss += (double)r * r;
      }
      long skipped;
      Octopt.Check(Octopt.octopt_step(opt, grads, null, (UIntPtr)1, IntPtr.Zero, out skipped));
    }
    UIntPtr bytes;
    Octopt.Check(Octopt.octopt_state_bytes(opt, out bytes));
    Console.WriteLine("loss " + loss.ToString("R") + " after " + steps + " steps; state bytes " + bytes);
    Octopt.octopt_optimizer_destroy(opt);
    gPin.Free();
    wPin.Free();
    using (var o = new BinaryWriter(File.Create(args[1])))
      foreach (float v in w) o.Write(v);
    return 0;
  }
}
