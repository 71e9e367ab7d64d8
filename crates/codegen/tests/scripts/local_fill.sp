@T.prim_func
def local_fill(a: T.handle, c: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m, 16), "float32")
    C = T.match_buffer(c, (m, 5), "float32")
    for i in T.serial(m):
        with T.block("row"):
            vi = T.axis.spatial(m, i)
            full = T.alloc_buffer((4, 4), "float32", scope="local")
            part = T.alloc_buffer((4, 4), "float32", scope="local")
            acc = T.alloc_buffer((4,), "float32", scope="local")
            cond = T.alloc_buffer((4,), "float32", scope="local")
            outer = T.alloc_buffer((4,), "float32", scope="local")
            for x in T.serial(4):
                for y in T.vectorized(4):
                    with T.block("full"):
                        vr = T.axis.spatial(m, i)
                        vx = T.axis.spatial(4, x)
                        vy = T.axis.spatial(4, y)
                        full[vx, vy] = A[vr, vx * 4 + vy]
            for x in T.serial(3):
                for y in T.serial(4):
                    with T.block("part"):
                        vx = T.axis.spatial(3, x)
                        vy = T.axis.spatial(4, y)
                        part[vx, vy] = A[vi, vx * 4 + vy]
            for x in T.serial(4):
                with T.block("acc"):
                    vx = T.axis.spatial(4, x)
                    acc[vx] = acc[vx] + A[vi, vx]
            if vi > 0:
                for x in T.serial(4):
                    with T.block("cond"):
                        vx = T.axis.spatial(4, x)
                        cond[vx] = A[vi, vx]
            for x in T.serial(4):
                with T.block("outer"):
                    vx = T.axis.spatial(4, x)
                    outer[T.floormod(vx + vi, 4)] = A[vi, vx + 8]
            C[vi, 0] = full[3, 3] + full[0, 1]
            C[vi, 1] = part[3, 0] + part[1, 1]
            C[vi, 2] = acc[2]
            C[vi, 3] = cond[1]
            C[vi, 4] = outer[2]
